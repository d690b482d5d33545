"""Which agents a tenant owns: the control plane keys its records by agent name only, so a tenant may
see an agent's versions and decisions only when every recorded run of that agent is its own."""

from __future__ import annotations

import sqlalchemy as sa

from evolvable.store.tables.trajectories import trajectories


def agents_owned_by(engine: sa.Engine, tenant_id: str) -> set[str]:
    """Agents with at least one trajectory, all of them of `tenant_id` (one grouped query)."""
    tenant = trajectories.c.tenant_id
    query = (
        sa.select(trajectories.c.agent)
        .group_by(trajectories.c.agent)
        .having(sa.and_(sa.func.min(tenant) == tenant_id, sa.func.max(tenant) == tenant_id))
    )
    with engine.connect() as conn:
        return {row[0] for row in conn.execute(query)}
