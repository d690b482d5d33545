"""Trajectories, their steps and signals, and the applied-event ledger that makes writes idempotent.

Fields that queries filter on are real, indexed columns; everything else of a
record is one JSON document (`header` / `body`), so ATDP can grow without a
migration for every new field.
"""

from __future__ import annotations

import sqlalchemy as sa

from evolvable.store.tables.base import metadata
from evolvable.store.tables.types import AutoIncrementBigInt, JSONDocument, JSONText, UTCDateTime

trajectories = sa.Table(
    "trajectories",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("tenant_id", sa.String, nullable=False),
    sa.Column("agent", sa.String, nullable=False),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("harness_version", sa.String),
    sa.Column("policy_version", sa.String),
    sa.Column("end_user", sa.String),
    sa.Column("task_id", sa.String),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("ended_at", UTCDateTime),
    sa.Column(
        "placeholder",
        sa.Boolean,
        nullable=False,
        server_default=sa.false(),
        comment="True until the trajectory_started event arrives (steps or signals came first).",
    ),
    sa.Column(
        "header",
        JSONDocument,
        nullable=False,
        comment="The rest of the ATDP header: schema_version, task_input, capture, metadata.",
    ),
    sa.Index(None, "tenant_id", "started_at", "id"),
    sa.Index(None, "started_at", "id"),
    sa.Index(None, "ended_at", "id"),
    sa.Index(None, "agent", "started_at"),
    sa.Index(None, "status"),
    sa.Index(None, "harness_version"),
    sa.Index(None, "policy_version"),
    sa.Index(None, "end_user"),
    sa.Index(None, "task_id"),
)

steps = sa.Table(
    "steps",
    metadata,
    sa.Column("seq", AutoIncrementBigInt, primary_key=True, autoincrement=True, comment="Arrival order."),
    # Not a foreign key (migration 0005): ingest writes and locks the parent, purges delete the children.
    sa.Column("trajectory_id", sa.String, nullable=False),
    sa.Column("step_id", sa.String, nullable=False),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("tool_call_id", sa.String),
    sa.Column("response_id", sa.String),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("body", JSONText, nullable=False, comment="The whole ATDP step."),
    sa.UniqueConstraint("trajectory_id", "step_id"),
)

signals = sa.Table(
    "signals",
    metadata,
    sa.Column("seq", AutoIncrementBigInt, primary_key=True, autoincrement=True, comment="Arrival order."),
    # Not a foreign key (migration 0005): ingest writes and locks the parent, purges delete the children.
    sa.Column("trajectory_id", sa.String, nullable=False),
    sa.Column("signal_id", sa.String, nullable=False),
    sa.Column(
        "step_id", sa.String, comment="None: about the whole trajectory. Not a foreign key: may precede its step."
    ),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("body", JSONText, nullable=False, comment="The whole ATDP signal."),
    sa.UniqueConstraint("trajectory_id", "signal_id"),
)

applied_events = sa.Table(
    "applied_events",
    metadata,
    sa.Column("event_id", sa.String, primary_key=True),
    sa.Column("trajectory_id", sa.String, nullable=False),
    sa.Column("applied_at", UTCDateTime, nullable=False),
    comment="Every event id ever applied. Kept after a purge, so replayed events cannot resurrect deleted data.",
    sqlite_with_rowid=False,  # (the primary key index is the table: one B-tree per claim, migration 0005)
)

purged_trajectories = sa.Table(
    "purged_trajectories",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("purged_at", UTCDateTime, nullable=False),
    comment="Trajectories deleted on purpose: events for them are dropped, so replays cannot resurrect them.",
)
