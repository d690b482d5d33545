"""The decision journal and rollouts: every lever choice is a record, from evidence to verdict."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from evolvable.control.models import (
    Decision,
    DecisionState,
    Lever,
    Rollout,
    RolloutState,
    Verdict,
    VersionKind,
)
from evolvable.control.registry import DEFAULT_TENANT, now, utc, write_transaction
from evolvable.errors import NotFound
from evolvable.protocol.models import new_id
from evolvable.store.tables.registry import control_decisions, control_rollouts


def jsonable(value: Any) -> Any:
    """Plain JSON types only (numpy scalars and tuples from the statistics become floats and lists)."""
    return json.loads(json.dumps(value, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def _decision(row: Any) -> Decision:
    return Decision(
        id=row.id,
        agent=row.agent,
        tenant=row.tenant,
        lever=Lever(row.lever),
        state=DecisionState(row.state),
        rationale=row.rationale or "",
        evidence=row.evidence or {},
        predicted=row.predicted or {},
        candidate_kind=VersionKind(row.candidate_kind) if row.candidate_kind else None,
        candidate_version=row.candidate_version,
        baseline_version=row.baseline_version,
        gates=row.gates or {},
        rollout_id=row.rollout_id,
        requires_approval=bool(row.requires_approval),
        approved_by=row.approved_by,
        verdict=Verdict(row.verdict) if row.verdict else None,
        verdict_detail=row.verdict_detail,
        created_at=utc(row.created_at),
        updated_at=utc(row.updated_at),
    )


def _rollout(row: Any) -> Rollout:
    return Rollout(
        id=row.id,
        agent=row.agent,
        tenant=row.tenant,
        kind=VersionKind(row.kind),
        decision_id=row.decision_id,
        candidate_version=row.candidate_version,
        baseline_version=row.baseline_version,
        share=row.share,
        state=RolloutState(row.state),
        extensions=row.extensions,
        analyses=row.analyses or [],
        started_at=utc(row.started_at),
        ended_at=utc(row.ended_at),
    )


class Journal:
    """Decisions and rollouts of one tenant (`tenant=None` reads every tenant, as the harness router does)."""

    def __init__(self, engine: Engine, tenant: str | None = DEFAULT_TENANT) -> None:
        self.engine = engine
        self.tenant = tenant

    def _scoped(self, q: Any, table: sa.Table) -> Any:
        return q if self.tenant is None else q.where(table.c.tenant == self.tenant)

    # ------------------------------------------------------------------ decisions

    def record_decision(
        self,
        agent: str,
        lever: Lever,
        *,
        state: DecisionState = DecisionState.proposed,
        rationale: str = "",
        evidence: dict[str, Any] | None = None,
        predicted: dict[str, Any] | None = None,
        baseline_version: str | None = None,
        requires_approval: bool = False,
    ) -> Decision:
        ts = now()
        decision_id = new_id("dec")
        with write_transaction(self.engine) as conn:
            conn.execute(
                control_decisions.insert().values(
                    id=decision_id,
                    agent=agent,
                    tenant=self.tenant or DEFAULT_TENANT,
                    lever=lever.value,
                    state=state.value,
                    rationale=rationale,
                    evidence=jsonable(evidence or {}),
                    predicted=jsonable(predicted or {}),
                    baseline_version=baseline_version,
                    gates={},
                    requires_approval=requires_approval,
                    created_at=ts,
                    updated_at=ts,
                )
            )
        return self.decision(decision_id)

    def update_decision(self, decision_id: str, **values: Any) -> Decision:
        clean = {k: (v.value if hasattr(v, "value") else jsonable(v)) for k, v in values.items()}
        with write_transaction(self.engine) as conn:
            result = conn.execute(
                self._scoped(
                    control_decisions.update().where(control_decisions.c.id == decision_id), control_decisions
                ).values(**clean, updated_at=now())
            )
            if result.rowcount == 0:
                raise NotFound(f"no decision {decision_id!r}")
        return self.decision(decision_id)

    def decision(self, decision_id: str) -> Decision:
        with self.engine.connect() as conn:
            rows = conn.execute(
                self._scoped(
                    sa.select(control_decisions).where(control_decisions.c.id.like(f"{decision_id}%")),
                    control_decisions,
                )
            ).all()
        if len(rows) != 1:
            raise NotFound(f"no decision {decision_id!r}" if not rows else f"{decision_id!r} is ambiguous")
        return _decision(rows[0])

    def decisions(
        self, agent: str | None = None, states: list[DecisionState] | None = None, limit: int = 200
    ) -> list[Decision]:
        q = self._scoped(
            sa.select(control_decisions).order_by(control_decisions.c.created_at.desc()).limit(limit), control_decisions
        )
        if agent:
            q = q.where(control_decisions.c.agent == agent)
        if states:
            q = q.where(control_decisions.c.state.in_([s.value for s in states]))
        with self.engine.connect() as conn:
            return [_decision(r) for r in conn.execute(q)]

    # ------------------------------------------------------------------ rollouts

    def start_rollout(
        self,
        agent: str,
        kind: VersionKind,
        candidate_version: str,
        baseline_version: str | None,
        share: float,
        decision_id: str | None,
    ) -> Rollout:
        rollout_id = new_id("ro")
        with write_transaction(self.engine) as conn:
            conn.execute(
                control_rollouts.insert().values(
                    id=rollout_id,
                    agent=agent,
                    tenant=self.tenant or DEFAULT_TENANT,
                    kind=kind.value,
                    decision_id=decision_id,
                    candidate_version=candidate_version,
                    baseline_version=baseline_version,
                    share=share,
                    state=RolloutState.running.value,
                    extensions=0,
                    analyses=[],
                    started_at=now(),
                )
            )
        return self.rollout(rollout_id)

    def rollout(self, rollout_id: str) -> Rollout:
        """A rollout by id or id prefix; a decision id finds that decision's rollout."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                self._scoped(
                    sa.select(control_rollouts).where(
                        sa.or_(
                            control_rollouts.c.id.like(f"{rollout_id}%"),
                            control_rollouts.c.decision_id == rollout_id,
                        )
                    ),
                    control_rollouts,
                )
            ).all()
        if len(rows) != 1:
            raise NotFound(f"no rollout {rollout_id!r}" if not rows else f"{rollout_id!r} is ambiguous")
        return _rollout(rows[0])

    def rollouts(self, agent: str | None = None, states: list[RolloutState] | None = None) -> list[Rollout]:
        q = self._scoped(sa.select(control_rollouts).order_by(control_rollouts.c.started_at.desc()), control_rollouts)
        if agent:
            q = q.where(control_rollouts.c.agent == agent)
        if states:
            q = q.where(control_rollouts.c.state.in_([s.value for s in states]))
        with self.engine.connect() as conn:
            return [_rollout(r) for r in conn.execute(q)]

    def update_rollout(self, rollout_id: str, **values: Any) -> Rollout:
        clean = {k: (v.value if hasattr(v, "value") else v) for k, v in values.items()}
        if "analyses" in clean:
            clean["analyses"] = jsonable(clean["analyses"])
        with write_transaction(self.engine) as conn:
            conn.execute(
                self._scoped(
                    control_rollouts.update().where(control_rollouts.c.id == rollout_id), control_rollouts
                ).values(**clean)
            )
        return self.rollout(rollout_id)
