"""The control plane's decision journal and rollouts. `tenant` None reads and updates across tenants."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from evolvable.store.repos.base import write_transaction
from evolvable.store.tables.registry import control_decisions, control_rollouts

Row = Mapping[str, Any]
_D, _R = control_decisions.c, control_rollouts.c


class JournalRows(Protocol):
    def insert_decision(self, row: Row) -> None: ...

    def update_decision(self, decision_id: str, values: Row, *, tenant: str | None) -> bool:
        """False when no such decision (in the tenant)."""
        ...

    def decisions_by_prefix(self, prefix: str, *, tenant: str | None) -> list[Row]: ...

    def decisions(
        self, *, tenant: str | None, agent: str | None, states: Sequence[str] | None, limit: int
    ) -> list[Row]:
        """Newest first."""
        ...

    def insert_rollout(self, row: Row) -> None: ...

    def update_rollout(self, rollout_id: str, values: Row, *, tenant: str | None) -> None: ...

    def rollouts_matching(self, ref: str, *, tenant: str | None) -> list[Row]:
        """Rollouts whose id starts with `ref`, or whose decision is `ref`."""
        ...

    def rollouts(self, *, tenant: str | None, agent: str | None, states: Sequence[str] | None) -> list[Row]:
        """Newest first."""
        ...


def _scoped(query: Any, table: sa.Table, tenant: str | None) -> Any:
    return query if tenant is None else query.where(table.c.tenant == tenant)


class SqlJournalRows:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def _all(self, query: Any) -> list[Row]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def insert_decision(self, row: Row) -> None:
        with write_transaction(self.engine) as conn:
            conn.execute(control_decisions.insert().values(**row))

    def update_decision(self, decision_id: str, values: Row, *, tenant: str | None) -> bool:
        query = _scoped(control_decisions.update().where(_D.id == decision_id), control_decisions, tenant)
        with write_transaction(self.engine) as conn:
            return bool(conn.execute(query.values(**values)).rowcount)

    def decisions_by_prefix(self, prefix: str, *, tenant: str | None) -> list[Row]:
        return self._all(
            _scoped(sa.select(control_decisions).where(_D.id.like(f"{prefix}%")), control_decisions, tenant)
        )

    def decisions(
        self, *, tenant: str | None, agent: str | None, states: Sequence[str] | None, limit: int
    ) -> list[Row]:
        query = _scoped(
            sa.select(control_decisions).order_by(_D.created_at.desc()).limit(limit), control_decisions, tenant
        )
        if agent:
            query = query.where(_D.agent == agent)
        if states:
            query = query.where(_D.state.in_(list(states)))
        return self._all(query)

    def insert_rollout(self, row: Row) -> None:
        with write_transaction(self.engine) as conn:
            conn.execute(control_rollouts.insert().values(**row))

    def update_rollout(self, rollout_id: str, values: Row, *, tenant: str | None) -> None:
        query = _scoped(control_rollouts.update().where(_R.id == rollout_id), control_rollouts, tenant)
        with write_transaction(self.engine) as conn:
            conn.execute(query.values(**values))

    def rollouts_matching(self, ref: str, *, tenant: str | None) -> list[Row]:
        query = sa.select(control_rollouts).where(sa.or_(_R.id.like(f"{ref}%"), _R.decision_id == ref))
        return self._all(_scoped(query, control_rollouts, tenant))

    def rollouts(self, *, tenant: str | None, agent: str | None, states: Sequence[str] | None) -> list[Row]:
        query = _scoped(sa.select(control_rollouts).order_by(_R.started_at.desc()), control_rollouts, tenant)
        if agent:
            query = query.where(_R.agent == agent)
        if states:
            query = query.where(_R.state.in_(list(states)))
        return self._all(query)


def journal_rows(source: JournalRows | sa.Engine) -> JournalRows:
    return SqlJournalRows(source) if isinstance(source, sa.Engine) else source
