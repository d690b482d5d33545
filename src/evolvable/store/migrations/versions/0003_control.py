"""control: tenant scope on registry, decisions and rollouts; versioned task clusterers

Revision ID: 0003_control
Revises: 0002
Create Date: 2026-11-25 16:30:35.745775
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_control"
down_revision: str | None = "0003_otel"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "control_clusterers",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=200), nullable=False),
        sa.Column("agent", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("method", sa.String(length=32), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("fitted_on", sa.Integer(), nullable=False, comment="Task inputs the clusterer was fitted on."),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.Column("artifact", sa.JSON(), nullable=False, comment="Vocabulary, idf and centroids."),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_control_clusterers")),
        sa.UniqueConstraint("tenant", "agent", "version", name=op.f("uq_control_clusterers_tenant_agent_version")),
    )
    with op.batch_alter_table("control_decisions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tenant", sa.String(length=200), server_default="default", nullable=False))
        batch_op.create_index(batch_op.f("ix_control_decisions_tenant"), ["tenant"], unique=False)

    with op.batch_alter_table("control_rollouts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tenant", sa.String(length=200), server_default="default", nullable=False))
        batch_op.create_index(batch_op.f("ix_control_rollouts_tenant"), ["tenant"], unique=False)

    with op.batch_alter_table("registry_transitions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tenant", sa.String(length=200), server_default="default", nullable=False))

    with op.batch_alter_table("registry_versions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tenant", sa.String(length=200), server_default="default", nullable=False))
        batch_op.drop_index(batch_op.f("uq_registry_one_active"))
        batch_op.drop_index(batch_op.f("uq_registry_one_canary"))
        batch_op.create_index(
            "uq_registry_one_active_tenant",
            ["tenant", "agent", "kind"],
            unique=True,
            sqlite_where=sa.text("state = 'active'"),
            postgresql_where=sa.text("state = 'active'"),
        )
        batch_op.create_index(
            "uq_registry_one_canary_tenant",
            ["tenant", "agent", "kind"],
            unique=True,
            sqlite_where=sa.text("state = 'canary'"),
            postgresql_where=sa.text("state = 'canary'"),
        )


def downgrade() -> None:
    with op.batch_alter_table("registry_versions", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_registry_one_canary_tenant",
            sqlite_where=sa.text("state = 'canary'"),
            postgresql_where=sa.text("state = 'canary'"),
        )
        batch_op.drop_index(
            "uq_registry_one_active_tenant",
            sqlite_where=sa.text("state = 'active'"),
            postgresql_where=sa.text("state = 'active'"),
        )
        batch_op.create_index(
            batch_op.f("uq_registry_one_canary"),
            ["agent", "kind"],
            unique=True,
            sqlite_where=sa.text("state = 'canary'"),
            postgresql_where=sa.text("state = 'canary'"),
        )
        batch_op.create_index(
            batch_op.f("uq_registry_one_active"),
            ["agent", "kind"],
            unique=True,
            sqlite_where=sa.text("state = 'active'"),
            postgresql_where=sa.text("state = 'active'"),
        )
        batch_op.drop_column("tenant")

    with op.batch_alter_table("registry_transitions", schema=None) as batch_op:
        batch_op.drop_column("tenant")

    with op.batch_alter_table("control_rollouts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_control_rollouts_tenant"))
        batch_op.drop_column("tenant")

    with op.batch_alter_table("control_decisions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_control_decisions_tenant"))
        batch_op.drop_column("tenant")

    op.drop_table("control_clusterers")
