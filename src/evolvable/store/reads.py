"""Whole trajectories read in batches: each as its header row plus its step and signal bodies, already joined.

The bodies stay the stored JSON text; `rows.assemble` splices them into one document that pydantic parses
once. On PostgreSQL the server joins them (`string_agg ... ORDER BY seq` in correlated subqueries), so a
batch is one round trip returning one row per trajectory instead of ~10; with JIT off (store/engine.py) the
training read measured 1.25-1.53x the three-query version in every side-by-side run (docs/PERFORMANCE.md,
"Session 4"). SQLite before 3.44 cannot order an aggregate's input, so there the rows come back one per step
and are joined here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import aggregate_order_by

from evolvable.store.rows import TrajectoryRow
from evolvable.store.tables.trajectories import signals, steps, trajectories

# (header row, step bodies joined by commas, signal bodies joined by commas)
TrajectoryTexts = tuple[TrajectoryRow, str, str]

_T = trajectories.c
_STEP_TEXT = sa.cast(steps.c.body, sa.Text)
_SIGNAL_TEXT = sa.cast(signals.c.body, sa.Text)


def _joined_bodies() -> tuple[sa.ScalarSelect[Any], sa.ScalarSelect[Any]]:
    """PostgreSQL: a trajectory's step bodies and its signal bodies, each joined in arrival order.

    A signal on a step that has not arrived yet stays out until the step does (as `assemble` requires)."""
    s, g, known = steps.alias("s"), signals.alias("g"), steps.alias("known")
    comma: sa.ColumnClause[str] = sa.literal_column("','")
    step_bodies = (
        sa.select(sa.func.string_agg(sa.cast(s.c.body, sa.Text), aggregate_order_by(comma, s.c.seq)))
        .where(s.c.trajectory_id == _T.id)
        .scalar_subquery()
    )
    step_arrived = sa.exists().where(known.c.trajectory_id == g.c.trajectory_id, known.c.step_id == g.c.step_id)
    signal_bodies = (
        sa.select(sa.func.string_agg(sa.cast(g.c.body, sa.Text), aggregate_order_by(comma, g.c.seq)))
        .where(g.c.trajectory_id == _T.id, sa.or_(g.c.step_id.is_(None), step_arrived))
        .scalar_subquery()
    )
    return step_bodies, signal_bodies


_STEP_BODIES, _SIGNAL_BODIES = _joined_bodies()


def trajectory_texts(
    conn: sa.Connection, headers: sa.Select[Any], parameters: dict[str, Any] | None = None
) -> list[TrajectoryTexts]:
    """The trajectories `headers` (a select of `trajectories` rows, filtered, ordered, limited) finds."""
    if conn.dialect.name == "postgresql":
        query = _BY_ID_WITH_BODIES if headers is BY_ID else _with_bodies(headers)
        found = conn.execute(query, parameters).mappings()
        return [(row, row["_step_bodies"] or "", row["_signal_bodies"] or "") for row in found]
    rows = conn.execute(headers, parameters).mappings().all()
    return _joined_here(conn, rows) if rows else []


# Built once: constructing a statement per call cost more than running it (cProfile of `get_trajectory`).
_IDS: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)
_STEPS_OF = (
    sa.select(steps.c.trajectory_id, steps.c.step_id, _STEP_TEXT)
    .where(steps.c.trajectory_id.in_(_IDS))
    .order_by(steps.c.seq)
)
_SIGNALS_OF = (
    sa.select(signals.c.trajectory_id, signals.c.step_id, _SIGNAL_TEXT)
    .where(signals.c.trajectory_id.in_(_IDS))
    .order_by(signals.c.seq)
)
BY_ID = sa.select(trajectories).where(_T.id == sa.bindparam("trajectory_id"))
"""The header of one trajectory; pass `{"trajectory_id": ...}` as `trajectory_texts`' parameters."""


def _with_bodies(headers: sa.Select[Any]) -> sa.Select[Any]:
    return headers.add_columns(_STEP_BODIES.label("_step_bodies"), _SIGNAL_BODIES.label("_signal_bodies"))


_BY_ID_WITH_BODIES = _with_bodies(BY_ID)


def _joined_here(conn: sa.Connection, headers: Sequence[sa.RowMapping]) -> list[TrajectoryTexts]:
    ids = [h["id"] for h in headers]
    step_rows = conn.execute(_STEPS_OF, {"ids": ids}).all()
    signal_rows = conn.execute(_SIGNALS_OF, {"ids": ids}).all()
    step_texts: dict[str, list[str]] = {i: [] for i in ids}
    arrived: set[tuple[str, str]] = set()
    for trajectory_id, step_id, text in step_rows:
        step_texts[trajectory_id].append(text)
        arrived.add((trajectory_id, step_id))
    signal_texts: dict[str, list[str]] = {i: [] for i in ids}
    for trajectory_id, step_id, text in signal_rows:
        if step_id is None or (trajectory_id, step_id) in arrived:
            signal_texts[trajectory_id].append(text)
    return [(h, ",".join(step_texts[h["id"]]), ",".join(signal_texts[h["id"]])) for h in headers]
