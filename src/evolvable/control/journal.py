"""The decision journal and rollouts: every lever choice is a record, from evidence to verdict."""

from __future__ import annotations

import json
from typing import Any

from evolvable.control.models import (
    Decision,
    DecisionState,
    Lever,
    Rollout,
    RolloutState,
    Verdict,
    VersionKind,
)
from evolvable.control.registry import DEFAULT_TENANT, now, utc
from evolvable.errors import NotFound
from evolvable.protocol.models import new_id
from evolvable.store.engine import Engine
from evolvable.store.repos.journal import JournalRows, Row, journal_rows


def jsonable(value: Any) -> Any:
    """Plain JSON types only (numpy scalars and tuples from the statistics become floats and lists)."""
    return json.loads(json.dumps(value, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def _only(rows: list[Row], what: str, wanted: str) -> Row:
    """The one row an id or id prefix names; NotFound when none or several match."""
    if len(rows) != 1:
        raise NotFound(f"no {what} {wanted!r}" if not rows else f"{wanted!r} is ambiguous")
    return rows[0]


def _decision(row: Row) -> Decision:
    return Decision(
        id=row["id"],
        agent=row["agent"],
        tenant=row["tenant"],
        lever=Lever(row["lever"]),
        state=DecisionState(row["state"]),
        rationale=row["rationale"] or "",
        evidence=row["evidence"] or {},
        predicted=row["predicted"] or {},
        candidate_kind=VersionKind(row["candidate_kind"]) if row["candidate_kind"] else None,
        candidate_version=row["candidate_version"],
        baseline_version=row["baseline_version"],
        gates=row["gates"] or {},
        rollout_id=row["rollout_id"],
        requires_approval=bool(row["requires_approval"]),
        approved_by=row["approved_by"],
        verdict=Verdict(row["verdict"]) if row["verdict"] else None,
        verdict_detail=row["verdict_detail"],
        created_at=utc(row["created_at"]),
        updated_at=utc(row["updated_at"]),
    )


def _rollout(row: Row) -> Rollout:
    return Rollout(
        id=row["id"],
        agent=row["agent"],
        tenant=row["tenant"],
        kind=VersionKind(row["kind"]),
        decision_id=row["decision_id"],
        candidate_version=row["candidate_version"],
        baseline_version=row["baseline_version"],
        share=row["share"],
        state=RolloutState(row["state"]),
        extensions=row["extensions"],
        analyses=row["analyses"] or [],
        started_at=utc(row["started_at"]),
        ended_at=utc(row["ended_at"]),
    )


class Journal:
    """Decisions and rollouts of one tenant (`tenant=None` reads every tenant, as the harness router does)."""

    def __init__(self, rows: JournalRows | Engine, tenant: str | None = DEFAULT_TENANT) -> None:
        self.rows = journal_rows(rows)
        self.tenant = tenant

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
        self.rows.insert_decision(
            {
                "id": decision_id,
                "agent": agent,
                "tenant": self.tenant or DEFAULT_TENANT,
                "lever": lever.value,
                "state": state.value,
                "rationale": rationale,
                "evidence": jsonable(evidence or {}),
                "predicted": jsonable(predicted or {}),
                "baseline_version": baseline_version,
                "gates": {},
                "requires_approval": requires_approval,
                "created_at": ts,
                "updated_at": ts,
            }
        )
        return self.decision(decision_id)

    def update_decision(self, decision_id: str, **values: Any) -> Decision:
        clean = {k: (v.value if hasattr(v, "value") else jsonable(v)) for k, v in values.items()}
        if not self.rows.update_decision(decision_id, {**clean, "updated_at": now()}, tenant=self.tenant):
            raise NotFound(f"no decision {decision_id!r}")
        return self.decision(decision_id)

    def decision(self, decision_id: str) -> Decision:
        return _decision(_only(self.rows.decisions_by_prefix(decision_id, tenant=self.tenant), "decision", decision_id))

    def decisions(
        self, agent: str | None = None, states: list[DecisionState] | None = None, limit: int = 200
    ) -> list[Decision]:
        wanted = [s.value for s in states] if states else None
        return [_decision(r) for r in self.rows.decisions(tenant=self.tenant, agent=agent, states=wanted, limit=limit)]

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
        self.rows.insert_rollout(
            {
                "id": rollout_id,
                "agent": agent,
                "tenant": self.tenant or DEFAULT_TENANT,
                "kind": kind.value,
                "decision_id": decision_id,
                "candidate_version": candidate_version,
                "baseline_version": baseline_version,
                "share": share,
                "state": RolloutState.running.value,
                "extensions": 0,
                "analyses": [],
                "started_at": now(),
            }
        )
        return self.rollout(rollout_id)

    def rollout(self, rollout_id: str) -> Rollout:
        """A rollout by id or id prefix; a decision id finds that decision's rollout."""
        return _rollout(_only(self.rows.rollouts_matching(rollout_id, tenant=self.tenant), "rollout", rollout_id))

    def rollouts(self, agent: str | None = None, states: list[RolloutState] | None = None) -> list[Rollout]:
        wanted = [s.value for s in states] if states else None
        return [_rollout(r) for r in self.rows.rollouts(tenant=self.tenant, agent=agent, states=wanted)]

    def update_rollout(self, rollout_id: str, **values: Any) -> Rollout:
        clean = {k: (v.value if hasattr(v, "value") else v) for k, v in values.items()}
        if "analyses" in clean:
            clean["analyses"] = jsonable(clean["analyses"])
        self.rows.update_rollout(rollout_id, clean, tenant=self.tenant)
        return self.rollout(rollout_id)
