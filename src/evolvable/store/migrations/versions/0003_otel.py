"""trajectories.ended_at index: the background OTLP exporter reads runs in the order they ended

Revision ID: 0003_otel
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003_otel"
down_revision: str | None = "0003_jobs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_trajectories_ended_at_id", "trajectories", ["ended_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_trajectories_ended_at_id", table_name="trajectories")
