"""store ingest: no foreign keys from steps and signals to trajectories

Revision ID: 0005_ingest
Revises: 0004_capture

Each step row fired PostgreSQL's referential-integrity trigger, an index probe of `trajectories` per row:
~10 us of server CPU per step, a quarter of a bulk insert's (binary COPY of 16,000 step rows: 21-23 us
per row without the key, 32-36 with it; docs/PERFORMANCE.md). What the keys guaranteed is kept by the
store itself, per batch instead of per row: ingest writes the parent row (a placeholder if need be)
before any child, and locks the parents it finds (`FOR KEY SHARE`, the lock the trigger took) so a purge
cannot remove one under it; `delete_trajectories` deletes the parents first, then their steps and
signals (the cascade it replaces). SQLite drops them too (a table rebuild), so both backends keep one
schema, the one the metadata declares.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005_ingest"
down_revision: str | None = "0004_capture"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHILDREN = ("steps", "signals")


def upgrade() -> None:
    for table in CHILDREN:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"fk_{table}_trajectory_id_trajectories", type_="foreignkey")


def downgrade() -> None:
    for table in CHILDREN:
        op.execute(f"DELETE FROM {table} WHERE trajectory_id NOT IN (SELECT id FROM trajectories)")
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(
                f"fk_{table}_trajectory_id_trajectories", "trajectories", ["trajectory_id"], ["id"], ondelete="CASCADE"
            )
