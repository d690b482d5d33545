"""Erasure reaches weights: an adapter trained on trajectories that a purge removed is flagged, listed in
the purge report, and — by the tenant's policy — retired (its parent version serves again) or kept
flagged for retraining (the next weights job cannot see the purged runs: they are gone from the store).

Governance's `Purger` knows nothing of the registry; it calls `WeightsErasure` with the ids of the
trajectories it removed (the composition root wires the two).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from evolvable.control.models import VersionKind, VersionRecord, VersionState
from evolvable.control.registry import Registry

ErasurePolicy = Literal["retire", "retrain"]
SERVING = (VersionState.active, VersionState.canary, VersionState.candidate)


def trained_on(record: VersionRecord) -> set[str]:
    """Trajectory ids a policy version's adapter was trained on (its lineage's data snapshot)."""
    raw = record.lineage.get("data_snapshot")
    if not raw:
        return set()
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return set()
    return set(data.get("trajectory_ids") or []) if isinstance(data, dict) else set()


@dataclass
class WeightsErasure:
    registry: Registry
    policy: ErasurePolicy = "retire"
    tenant_policies: Mapping[str, ErasurePolicy] = field(default_factory=dict)
    """Per-tenant choice; tenants not listed get `policy`."""
    tenant_of: Callable[[VersionRecord], str | None] = lambda record: None

    def __call__(self, purged_ids: Iterable[str]) -> list[dict[str, Any]]:
        """Flag (and by policy retire) every serving adapter that learnt from a purged trajectory."""
        purged = set(purged_ids)
        if not purged:
            return []
        affected = []
        for record in self.registry.versions(kind=VersionKind.policy, states=list(SERVING)):
            hits = trained_on(record) & purged
            if hits:
                affected.append(self._act(record, len(hits)))
        return affected

    def _act(self, record: VersionRecord, hits: int) -> dict[str, Any]:
        tenant = self.tenant_of(record)
        policy = self.tenant_policies.get(tenant or "", self.policy)
        reason = f"trained on {hits} purged trajectories"
        action = "flagged for retraining"
        if policy == "retire":
            action = self._retire(record, reason)
        return {"policy_version": record.id, "agent": record.agent, "purged_trajectories": hits, "action": action}

    def _retire(self, record: VersionRecord, reason: str) -> str:
        if record.state != VersionState.active:
            self.registry.reject(record.id, reason=reason, actor="erasure")
            return "rejected"
        parent = record.parent_id
        if parent is None:
            return "flagged: active with no earlier version to restore; retrain or roll back by hand"
        self.registry.restore(parent, reason=f"{record.id} {reason}", actor="erasure")
        return f"retired; {parent} restored"
