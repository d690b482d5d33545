"""Dataset snapshots and their item copies. A snapshot is written in one transaction with its audit entry."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from evolvable.store.repos.audit import AuditRecord, append_in
from evolvable.store.tables.governance import dataset_items, datasets

Row = Mapping[str, Any]


class SnapshotWriter(Protocol):
    version: int
    """The version this snapshot gets (one past the newest of its name and scope)."""

    def add_items(self, rows: Sequence[Row]) -> None: ...

    def finish(self, dataset: Row, audit: AuditRecord) -> None: ...


class DatasetRows(Protocol):
    def snapshot(self, scope: str, name: str) -> AbstractContextManager[SnapshotWriter]:
        """A transaction for the next version of `name`: items, then `finish`; an error rolls all back."""
        ...

    def datasets(self, tenant_id: str | None) -> list[Row]:
        """By name, then version."""
        ...

    def versions(self, name: str, *, tenant_id: str | None, version: int | None) -> list[Row]:
        """The matching snapshots, newest version first."""
        ...

    def items(self, dataset_id: str, *, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """(position, trajectory JSON) past `after`, in order."""
        ...

    def exported(self, dataset_id: str, *, first: bool, at: datetime, audit: AuditRecord) -> None:
        """Record an export (its time only on the `first`) with its audit entry."""
        ...


class _SqlSnapshot:
    def __init__(self, conn: sa.Connection, version: int) -> None:
        self.conn, self.version = conn, version

    def add_items(self, rows: Sequence[Row]) -> None:
        if rows:
            self.conn.execute(dataset_items.insert(), [dict(r) for r in rows])

    def finish(self, dataset: Row, audit: AuditRecord) -> None:
        self.conn.execute(datasets.insert(), dict(dataset))
        append_in(self.conn, audit)


class SqlDatasetRows:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def snapshot(self, scope: str, name: str) -> AbstractContextManager[SnapshotWriter]:
        return self._snapshot(scope, name)

    @contextmanager
    def _snapshot(self, scope: str, name: str) -> Iterator[SnapshotWriter]:
        with self.engine.begin() as conn:
            newest = conn.execute(
                sa.select(sa.func.max(datasets.c.version)).where(datasets.c.tenant_id == scope, datasets.c.name == name)
            ).scalar()
            yield _SqlSnapshot(conn, 1 + (newest or 0))

    def datasets(self, tenant_id: str | None) -> list[Row]:
        stmt = sa.select(datasets).order_by(datasets.c.name, datasets.c.version)
        if tenant_id is not None:
            stmt = stmt.where(datasets.c.tenant_id == tenant_id)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(stmt)]

    def versions(self, name: str, *, tenant_id: str | None, version: int | None) -> list[Row]:
        stmt = sa.select(datasets).where(datasets.c.name == name)
        if tenant_id is not None:
            stmt = stmt.where(datasets.c.tenant_id == tenant_id)
        if version is not None:
            stmt = stmt.where(datasets.c.version == version)
        stmt = stmt.order_by(datasets.c.version.desc(), datasets.c.created_at.desc())
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(stmt)]

    def items(self, dataset_id: str, *, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        stmt = (
            sa.select(dataset_items.c.position, dataset_items.c.trajectory)
            .where(dataset_items.c.dataset_id == dataset_id, dataset_items.c.position > after)
            .order_by(dataset_items.c.position)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [(r.position, r.trajectory) for r in conn.execute(stmt)]

    def exported(self, dataset_id: str, *, first: bool, at: datetime, audit: AuditRecord) -> None:
        with self.engine.begin() as conn:
            if first:
                conn.execute(datasets.update().where(datasets.c.id == dataset_id).values(exported_at=at))
            append_in(conn, audit)


def dataset_rows(source: DatasetRows | sa.Engine) -> DatasetRows:
    return SqlDatasetRows(source) if isinstance(source, sa.Engine) else source
