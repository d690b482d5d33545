"""Trajectories, steps, signals and the applied-event ledger.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIGSERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "trajectories",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("tenant_id", sa.String(), nullable=False),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("harness_version", sa.String(), nullable=True),
        sa.Column("policy_version", sa.String(), nullable=True),
        sa.Column("end_user", sa.String(), nullable=True),
        sa.Column("task_id", sa.String(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "placeholder",
            sa.Boolean(),
            server_default=sa.false(),
            nullable=False,
            comment="True until the trajectory_started event arrives (steps or signals came first).",
        ),
        sa.Column(
            "header",
            JSON,
            nullable=False,
            comment="The rest of the ATDP header: schema_version, task_input, capture, metadata.",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_trajectories"),
    )
    for name, columns in [
        ("ix_trajectories_tenant_id_started_at_id", ["tenant_id", "started_at", "id"]),
        ("ix_trajectories_started_at_id", ["started_at", "id"]),
        ("ix_trajectories_agent_started_at", ["agent", "started_at"]),
        ("ix_trajectories_status", ["status"]),
        ("ix_trajectories_harness_version", ["harness_version"]),
        ("ix_trajectories_policy_version", ["policy_version"]),
        ("ix_trajectories_end_user", ["end_user"]),
        ("ix_trajectories_task_id", ["task_id"]),
    ]:
        op.create_index(name, "trajectories", columns)

    op.create_table(
        "steps",
        sa.Column("seq", BIGSERIAL, autoincrement=True, nullable=False, comment="Arrival order."),
        sa.Column("trajectory_id", sa.String(), nullable=False),
        sa.Column("step_id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("tool_call_id", sa.String(), nullable=True),
        sa.Column("response_id", sa.String(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", JSON, nullable=False, comment="The whole ATDP step."),
        sa.ForeignKeyConstraint(
            ["trajectory_id"], ["trajectories.id"], name="fk_steps_trajectory_id_trajectories", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("seq", name="pk_steps"),
        sa.UniqueConstraint("trajectory_id", "step_id", name="uq_steps_trajectory_id_step_id"),
    )

    op.create_table(
        "signals",
        sa.Column("seq", BIGSERIAL, autoincrement=True, nullable=False, comment="Arrival order."),
        sa.Column("trajectory_id", sa.String(), nullable=False),
        sa.Column("signal_id", sa.String(), nullable=False),
        sa.Column(
            "step_id",
            sa.String(),
            nullable=True,
            comment="None: about the whole trajectory. Not a foreign key: may precede its step.",
        ),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", JSON, nullable=False, comment="The whole ATDP signal."),
        sa.ForeignKeyConstraint(
            ["trajectory_id"], ["trajectories.id"], name="fk_signals_trajectory_id_trajectories", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("seq", name="pk_signals"),
        sa.UniqueConstraint("trajectory_id", "signal_id", name="uq_signals_trajectory_id_signal_id"),
    )

    op.create_table(
        "applied_events",
        sa.Column("event_id", sa.String(), nullable=False),
        sa.Column("trajectory_id", sa.String(), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name="pk_applied_events"),
        comment="Every event id ever applied. Kept after a purge, so replayed events cannot resurrect deleted data.",
    )
    op.create_index("ix_applied_events_trajectory_id", "applied_events", ["trajectory_id"])


def downgrade() -> None:
    op.drop_index("ix_applied_events_trajectory_id", table_name="applied_events")
    op.drop_table("applied_events")
    op.drop_table("signals")
    op.drop_table("steps")
    for name in [
        "ix_trajectories_task_id",
        "ix_trajectories_end_user",
        "ix_trajectories_policy_version",
        "ix_trajectories_harness_version",
        "ix_trajectories_status",
        "ix_trajectories_agent_started_at",
        "ix_trajectories_started_at_id",
        "ix_trajectories_tenant_id_started_at_id",
    ]:
        op.drop_index(name, table_name="trajectories")
    op.drop_table("trajectories")
