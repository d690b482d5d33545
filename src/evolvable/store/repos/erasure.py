"""Erasing the copies a purge covers: dataset items (their snapshots marked invalidated) and proxy session rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import sqlalchemy as sa

from evolvable.store.repos.audit import AuditRecord, append_in
from evolvable.store.tables.governance import dataset_items, datasets
from evolvable.store.tables.proxy import proxy_sessions


@dataclass(frozen=True)
class ErasureSelector:
    """What a purge covers; every given field must hold. At least one is required."""

    tenant_id: str | None = None
    end_user: str | None = None
    trajectory_id: str | None = None
    started_before: datetime | None = None

    def is_empty(self) -> bool:
        return not (self.tenant_id or self.end_user or self.trajectory_id or self.started_before)


class ErasureRows(Protocol):
    def erase_copies(
        self,
        selector: ErasureSelector,
        *,
        reason: str,
        at: datetime,
        audit: Callable[[int, int], AuditRecord | None],
    ) -> tuple[int, int]:
        """Delete session rows and dataset items, invalidate their snapshots and append `audit(items,
        invalidated)` (unless None), in one transaction. Returns (items deleted, datasets invalidated)."""
        ...

    def checkpoint(self) -> bool | None:
        """SQLite: truncate the WAL so erased page images go too (True if complete); None elsewhere."""
        ...


class SqlErasureRows:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def erase_copies(
        self,
        selector: ErasureSelector,
        *,
        reason: str,
        at: datetime,
        audit: Callable[[int, int], AuditRecord | None],
    ) -> tuple[int, int]:
        if selector.is_empty():
            raise ValueError("refusing to erase copies without a selector")
        with self.engine.begin() as conn:
            _forget_sessions(conn, selector)
            items, invalidated = _drop_items(conn, selector, reason, at)
            append_in(conn, audit(items, invalidated))
        return items, invalidated

    def checkpoint(self) -> bool | None:
        if self.engine.dialect.name != "sqlite":
            return None
        with self.engine.connect() as conn:
            busy = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").first()
        return busy is not None and busy[0] == 0


def _forget_sessions(conn: sa.Connection, selector: ErasureSelector) -> None:
    """The proxy's session rows name the end user too; erase them with the runs."""
    table = proxy_sessions
    if not sa.inspect(conn).has_table(table.name):
        return
    clauses = []
    if selector.tenant_id is not None:
        clauses.append(table.c.tenant_id == selector.tenant_id)
    if selector.end_user is not None:
        clauses.append(table.c.end_user == selector.end_user)
    if selector.trajectory_id is not None:
        clauses.append(table.c.id == selector.trajectory_id)
    if selector.started_before is not None:
        clauses.append(table.c.created_at < selector.started_before)
        clauses.append(table.c.status != "running")
    conn.execute(table.delete().where(sa.and_(*clauses)))


def _drop_items(conn: sa.Connection, selector: ErasureSelector, reason: str, at: datetime) -> tuple[int, int]:
    items = dataset_items.c
    clauses = []
    if selector.tenant_id is not None:
        clauses.append(items.tenant_id == selector.tenant_id)
    if selector.end_user is not None:
        clauses.append(items.end_user == selector.end_user)
    if selector.trajectory_id is not None:
        clauses.append(items.trajectory_id.in_([selector.trajectory_id]))
    if selector.started_before is not None:
        clauses.append(items.started_at < selector.started_before)
    where = sa.and_(*clauses)
    hit = [r.dataset_id for r in conn.execute(sa.select(items.dataset_id).where(where).distinct())]
    if not hit:
        return 0, 0
    deleted = conn.execute(dataset_items.delete().where(where)).rowcount or 0
    conn.execute(
        datasets.update()
        .where(datasets.c.id.in_(hit), datasets.c.invalidated_at.is_(None))
        .values(invalidated_at=at, invalidated_reason=reason)
    )
    return deleted, len(hit)


def erasure_rows(source: ErasureRows | sa.Engine) -> ErasureRows:
    return SqlErasureRows(source) if isinstance(source, sa.Engine) else source
