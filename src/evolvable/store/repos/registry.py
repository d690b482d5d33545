"""Harness and policy versions and their state transitions (the control plane's registry).

The state machine lives in `control.registry`; this module only reads and writes rows. A change spans
several statements (insert, retire the occupant, log each transition), so writers get a `RegistryChange`
inside one write transaction, with row locks on PostgreSQL where asked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from evolvable.store.repos.base import write_transaction
from evolvable.store.tables.registry import registry_transitions, registry_versions

Row = Mapping[str, Any]
_V = registry_versions.c


class RegistryChange(Protocol):
    """Reads and writes inside one transaction. `tenant` None: any tenant."""

    def version(self, version_id: str, *, tenant: str | None, lock: bool = False) -> Row | None: ...

    def current(self, agent: str, kind: str, state: str, *, tenant: str, lock: bool = False) -> Row | None:
        """The version of `agent` and `kind` in `state` within `tenant`."""
        ...

    def harness_versions(self, *, tenant: str | None) -> list[Row]: ...

    def insert_version(self, row: Row) -> None: ...

    def set_state(self, version_id: str, state: str, at: datetime) -> None: ...

    def set_content(self, version_id: str, content: dict[str, Any], lineage: dict[str, Any], at: datetime) -> None: ...

    def log_transition(self, row: Row) -> None: ...


class RegistryRows(Protocol):
    def change(self) -> AbstractContextManager[RegistryChange]:
        """One write transaction (everything commits together or not at all)."""
        ...

    def version(self, version_id: str, *, tenant: str | None) -> Row | None: ...

    def current(self, agent: str, kind: str, state: str, *, tenant: str) -> Row | None: ...

    def by_prefix(self, prefix: str, kind: str, *, tenant: str | None) -> list[Row]: ...

    def versions(
        self, *, tenant: str | None, agent: str | None, kind: str | None, states: Sequence[str] | None
    ) -> list[Row]:
        """Oldest first."""
        ...

    def agents(self, *, tenant: str | None) -> list[str]: ...

    def tenants(self, *, tenant: str | None) -> list[str]: ...

    def transitions(self, *, tenant: str | None, version_id: str | None, agent: str | None) -> list[Row]:
        """In the order they happened."""
        ...


def _scoped(query: Any, tenant: str | None, table: sa.Table = registry_versions) -> Any:
    return query if tenant is None else query.where(table.c.tenant == tenant)


class _SqlChange:
    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn

    def _locked(self, query: Any, lock: bool) -> Any:
        return query.with_for_update() if lock and self.conn.dialect.name == "postgresql" else query

    def version(self, version_id: str, *, tenant: str | None, lock: bool = False) -> Row | None:
        query = _scoped(sa.select(registry_versions).where(_V.id == version_id), tenant)
        row = self.conn.execute(self._locked(query, lock)).first()
        return None if row is None else dict(row._mapping)

    def current(self, agent: str, kind: str, state: str, *, tenant: str, lock: bool = False) -> Row | None:
        query = sa.select(registry_versions).where(
            _V.agent == agent, _V.kind == kind, _V.state == state, _V.tenant == tenant
        )
        row = self.conn.execute(self._locked(query, lock)).first()
        return None if row is None else dict(row._mapping)

    def harness_versions(self, *, tenant: str | None) -> list[Row]:
        query = _scoped(sa.select(registry_versions).where(_V.kind == "harness"), tenant)
        return [dict(r._mapping) for r in self.conn.execute(query)]

    def insert_version(self, row: Row) -> None:
        self.conn.execute(registry_versions.insert().values(**row))

    def set_state(self, version_id: str, state: str, at: datetime) -> None:
        self.conn.execute(registry_versions.update().where(_V.id == version_id).values(state=state, updated_at=at))

    def set_content(self, version_id: str, content: dict[str, Any], lineage: dict[str, Any], at: datetime) -> None:
        self.conn.execute(
            registry_versions.update()
            .where(_V.id == version_id)
            .values(content=content, lineage=lineage, updated_at=at)
        )

    def log_transition(self, row: Row) -> None:
        self.conn.execute(registry_transitions.insert().values(**row))


class SqlRegistryRows:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def change(self) -> AbstractContextManager[RegistryChange]:
        return self._change()

    @contextmanager
    def _change(self) -> Iterator[RegistryChange]:
        with write_transaction(self.engine) as conn:
            yield _SqlChange(conn)

    def version(self, version_id: str, *, tenant: str | None) -> Row | None:
        with self.engine.connect() as conn:
            return _SqlChange(conn).version(version_id, tenant=tenant)

    def current(self, agent: str, kind: str, state: str, *, tenant: str) -> Row | None:
        with self.engine.connect() as conn:
            return _SqlChange(conn).current(agent, kind, state, tenant=tenant)

    def by_prefix(self, prefix: str, kind: str, *, tenant: str | None) -> list[Row]:
        query = _scoped(sa.select(registry_versions).where(_V.id.like(f"{prefix}%"), _V.kind == kind), tenant)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def versions(
        self, *, tenant: str | None, agent: str | None, kind: str | None, states: Sequence[str] | None
    ) -> list[Row]:
        query = _scoped(sa.select(registry_versions).order_by(_V.created_at), tenant)
        if agent is not None:
            query = query.where(_V.agent == agent)
        if kind is not None:
            query = query.where(_V.kind == kind)
        if states:
            query = query.where(_V.state.in_(list(states)))
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def agents(self, *, tenant: str | None) -> list[str]:
        with self.engine.connect() as conn:
            return sorted(r[0] for r in conn.execute(_scoped(sa.select(_V.agent).distinct(), tenant)))

    def tenants(self, *, tenant: str | None) -> list[str]:
        with self.engine.connect() as conn:
            return sorted(r[0] for r in conn.execute(_scoped(sa.select(_V.tenant).distinct(), tenant)))

    def transitions(self, *, tenant: str | None, version_id: str | None, agent: str | None) -> list[Row]:
        t = registry_transitions.c
        query = _scoped(sa.select(registry_transitions).order_by(t.id), tenant, registry_transitions)
        if version_id:
            query = query.where(t.version_id == version_id)
        if agent:
            query = query.where(t.agent == agent)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]


def registry_rows(source: RegistryRows | sa.Engine) -> RegistryRows:
    return SqlRegistryRows(source) if isinstance(source, sa.Engine) else source
