"""The append-only audit log's rows. There is no update or delete: triggers (migration 0002) refuse both."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from evolvable.store.tables.governance import audit_log


@dataclass(frozen=True)
class AuditRecord:
    """One entry to append; `action` is the AuditAction's value."""

    at: datetime
    actor: str
    action: str
    tenant_id: str | None = None
    target: str = ""
    details: dict[str, Any] = field(default_factory=dict)


class AuditRows(Protocol):
    def append(self, record: AuditRecord) -> None: ...

    def query(
        self, *, tenant_id: str | None, action: str | None, since: datetime | None, limit: int
    ) -> list[Mapping[str, Any]]:
        """Entries newest first, as mappings of the audit_log columns."""
        ...


class SqlAuditRows:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def append(self, record: AuditRecord) -> None:
        with self.engine.begin() as conn:
            append_in(conn, record)

    def query(
        self, *, tenant_id: str | None, action: str | None, since: datetime | None, limit: int
    ) -> list[Mapping[str, Any]]:
        stmt = sa.select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
        if tenant_id is not None:
            stmt = stmt.where(audit_log.c.tenant_id == tenant_id)
        if action is not None:
            stmt = stmt.where(audit_log.c.action == action)
        if since is not None:
            stmt = stmt.where(audit_log.c.at >= since)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(stmt)]


def append_in(conn: sa.Connection, record: AuditRecord | None) -> None:
    """Append inside another repository's transaction (a change and its entry commit together)."""
    if record is not None:
        conn.execute(audit_log.insert(), asdict(record))


def audit_rows(source: AuditRows | sa.Engine) -> AuditRows:
    return SqlAuditRows(source) if isinstance(source, sa.Engine) else source
