"""Signals a person should look at: the dashboard's annotation queue reads its candidates here."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from evolvable.store.tables.trajectories import signals, trajectories


def recent_signals(engine: sa.Engine, kind: str, tenant_id: str | None, limit: int = 500) -> list[dict[str, Any]]:
    """The newest `limit` signals of `kind` (their whole ATDP body plus trajectory, agent and tenant)."""
    query = (
        sa.select(signals.c.trajectory_id, signals.c.body, trajectories.c.agent, trajectories.c.tenant_id)
        .join(trajectories, trajectories.c.id == signals.c.trajectory_id)
        .where(signals.c.kind == kind)
        .order_by(signals.c.seq.desc())
        .limit(limit)
    )
    if tenant_id is not None:
        query = query.where(trajectories.c.tenant_id == tenant_id)
    with engine.connect() as conn:
        return [
            {"trajectory_id": r.trajectory_id, "agent": r.agent, "tenant_id": r.tenant_id, "signal": r.body}
            for r in conn.execute(query)
        ]


def trajectories_with_signal(engine: sa.Engine, kind: str, trajectory_ids: list[str]) -> set[str]:
    """Which of `trajectory_ids` already carry a signal of `kind`."""
    if not trajectory_ids:
        return set()
    query = sa.select(signals.c.trajectory_id).where(
        signals.c.kind == kind, signals.c.trajectory_id.in_(trajectory_ids)
    )
    with engine.connect() as conn:
        return {r[0] for r in conn.execute(query.distinct())}
