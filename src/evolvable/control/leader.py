"""One acting control plane across replicas: the leader holds the store's database lease.

The lock itself (PostgreSQL advisory lock, SQLite lease row) is storage: `store.repos.leases`.
"""

from __future__ import annotations

from evolvable.store.repos.leases import DatabaseLease, Lease

LeaderLock = DatabaseLease
"""The control plane's leader lock: `LeaderLock(store.engine, lease_s=...)`."""

__all__ = ["LeaderLock", "Lease"]
