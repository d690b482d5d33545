"""key roles and session minting keys: api_keys.role (operator | admin | tenant), proxy_sessions.minted_by

Revision ID: 0003_harden
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_harden"
down_revision: str | None = "0003_ingest"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(
            sa.Column(
                "role",
                sa.String(length=16),
                nullable=True,
                comment="operator | admin | tenant; NULL: admin if is_admin else tenant (keys issued before roles).",
            )
        )
    with op.batch_alter_table("proxy_sessions") as batch:
        batch.add_column(
            sa.Column(
                "minted_by",
                sa.String(length=64),
                nullable=True,
                comment="The API key that created the session; the session key dies with it.",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("proxy_sessions") as batch:
        batch.drop_column("minted_by")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("role")
