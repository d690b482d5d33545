"""The proxy's session rows (`proxy_sessions`): who a session key belongs to, its versions, its status."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from evolvable.store.tables.proxy import proxy_sessions

Row = Mapping[str, Any]
_S = proxy_sessions.c
RUNNING = "running"


class SessionRows(Protocol):
    def insert(self, row: Row) -> None: ...

    def by_key_hash(self, key_hash: str) -> Row | None: ...

    def by_id(self, session_id: str) -> Row | None: ...

    def running(self) -> list[Row]: ...

    def set_ended(self, session_ids: Sequence[str], status: str, ended_at: datetime) -> None: ...

    def set_versions(self, session_id: str, harness_version: str | None, policy_version: str | None) -> None: ...

    def end_running(self, session_id: str, status: str) -> None:
        """The status of a session still running (an ended one keeps its own)."""
        ...


class SqlSessionRows:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def _first(self, where: Any) -> Row | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(proxy_sessions).where(where)).mappings().first()
        return None if row is None else dict(row)

    def _write(self, statement: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(statement)

    def insert(self, row: Row) -> None:
        self._write(proxy_sessions.insert().values(**row))

    def by_key_hash(self, key_hash: str) -> Row | None:
        return self._first(_S.key_hash == key_hash)

    def by_id(self, session_id: str) -> Row | None:
        return self._first(_S.id == session_id)

    def running(self) -> list[Row]:
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(proxy_sessions).where(_S.status == RUNNING)).mappings()]

    def set_ended(self, session_ids: Sequence[str], status: str, ended_at: datetime) -> None:
        if session_ids:
            ids = list(session_ids)
            self._write(sa.update(proxy_sessions).where(_S.id.in_(ids)).values(status=status, ended_at=ended_at))

    def set_versions(self, session_id: str, harness_version: str | None, policy_version: str | None) -> None:
        versions = {"harness_version": harness_version, "policy_version": policy_version}
        self._write(sa.update(proxy_sessions).where(_S.id == session_id).values(**versions))

    def end_running(self, session_id: str, status: str) -> None:
        self._write(sa.update(proxy_sessions).where(_S.id == session_id, _S.status == RUNNING).values(status=status))
