"""training jobs (the weights lever's background jobs)

Revision ID: 0003_jobs
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_jobs"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "training_jobs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=200), nullable=True),
        sa.Column("agent", sa.String(length=200), nullable=False),
        sa.Column(
            "decision_id", sa.String(length=64), nullable=True, comment="The control decision that asked for this job."
        ),
        sa.Column(
            "state", sa.String(length=16), nullable=False, comment="queued | running | succeeded | failed | consumed"
        ),
        sa.Column("launcher", sa.String(length=64), nullable=False),
        sa.Column(
            "handle",
            sa.String(length=500),
            nullable=True,
            comment="The launcher's id of the running job: a pid, a Slurm job id...",
        ),
        sa.Column("output_dir", sa.Text(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False, comment="Config, data lineage (trajectory ids, windows), policy."),
        sa.Column("progress", sa.JSON(), nullable=False, comment="Latest progress and metrics the job reported."),
        sa.Column(
            "result", sa.JSON(), nullable=True, comment="The finished job's result: adapter, snapshots, metrics."
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_training_jobs")),
    )
    op.create_index(op.f("ix_training_jobs_agent_state"), "training_jobs", ["agent", "state"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_training_jobs_agent_state"), table_name="training_jobs")
    op.drop_table("training_jobs")
