"""Who may act, by a database lock: one holder of a named lease across processes and machines.

PostgreSQL: a session-level advisory lock (`pg_try_advisory_lock`) held on a dedicated connection;
if that connection dies the server releases the lock and another holder takes over. SQLite (one
machine): a lease row in `control_leases` with an expiry, renewed on every tick.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import Protocol

import sqlalchemy as sa

from evolvable.store.repos.base import now, utc, write_transaction
from evolvable.store.tables.registry import control_leases


class Lease(Protocol):
    """The control plane's leader lock, as control sees it."""

    def acquire(self) -> bool:
        """True when this holder is (still) the leader."""
        ...

    def kept(self) -> AbstractContextManager[None]:
        """Keep the lease while a long tick runs."""
        ...

    def release(self) -> None: ...


ADVISORY_KEY = 0x45564F43  # "EVOC"


class DatabaseLease:
    """One holder at a time across processes: the lease the control plane's leader keeps."""

    def __init__(self, engine: sa.Engine, *, name: str = "control-plane", lease_s: float = 60.0) -> None:
        self.engine = engine
        self.name = name
        self.lease_s = lease_s
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._conn: sa.Connection | None = None

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    def acquire(self) -> bool:
        """True when this instance is (still) the leader."""
        return self._acquire_pg() if self.is_postgres else self._acquire_lease()

    @contextmanager
    def kept(self) -> Iterator[None]:
        """Keep a SQLite lease renewed while a long tick runs, so no other replica takes over mid-tick.
        (PostgreSQL's advisory lock lasts as long as its connection; nothing to renew.)"""
        if self.is_postgres:
            yield
            return
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self.lease_s / 3):
                try:
                    self._acquire_lease()
                except sa.exc.SQLAlchemyError:  # the next tick acquires again or steps down
                    return

        thread = threading.Thread(target=renew, name="evolvable-leader-lease", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def release(self) -> None:
        if self.is_postgres:
            if self._conn is not None:
                try:
                    self._conn.execute(sa.select(sa.func.pg_advisory_unlock(ADVISORY_KEY)))
                    self._conn.commit()
                finally:
                    self._conn.close()
                    self._conn = None
            return
        with write_transaction(self.engine) as conn:
            conn.execute(
                control_leases.delete().where(
                    control_leases.c.name == self.name, control_leases.c.holder == self.holder
                )
            )

    def _acquire_pg(self) -> bool:
        if self._conn is not None:
            try:
                self._conn.execute(sa.text("select 1"))
                self._conn.commit()
                return True
            except sa.exc.DBAPIError:
                self._conn.close()
                self._conn = None
        conn = self.engine.connect()
        got = bool(conn.execute(sa.select(sa.func.pg_try_advisory_lock(ADVISORY_KEY))).scalar())
        conn.commit()
        if got:
            self._conn = conn
        else:
            conn.close()
        return got

    def _acquire_lease(self) -> bool:
        ts = now()
        expires = ts + timedelta(seconds=self.lease_s)
        with write_transaction(self.engine) as conn:
            row = conn.execute(sa.select(control_leases).where(control_leases.c.name == self.name)).first()
            if row is None:
                conn.execute(control_leases.insert().values(name=self.name, holder=self.holder, expires_at=expires))
                return True
            if row.holder == self.holder or utc(row.expires_at) < ts:
                conn.execute(
                    control_leases.update()
                    .where(control_leases.c.name == self.name)
                    .values(holder=self.holder, expires_at=expires)
                )
                return True
            return False
