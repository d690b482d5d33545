"""store ingest: no foreign keys from steps and signals to trajectories; purge tombstones; a leaner ledger

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

The ledger (`applied_events`, 1.4 rows per step) loses its `trajectory_id` index: it only served the
question "was this trajectory purged?", which `purged_trajectories` (one row per purged trajectory,
written by `delete_trajectories`, filled here from the ledger) now answers. On SQLite the ledger
becomes a WITHOUT ROWID table (the primary key index is the table). One index insert per event fewer
on PostgreSQL, two on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
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
    op.create_table(
        "purged_trajectories",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("purged_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_purged_trajectories"),
        comment="Trajectories deleted on purpose: events for them are dropped, so replays cannot resurrect them.",
    )
    op.execute(
        "INSERT INTO purged_trajectories (id, purged_at) SELECT DISTINCT a.trajectory_id, CURRENT_TIMESTAMP "
        "FROM applied_events a WHERE NOT EXISTS (SELECT 1 FROM trajectories t WHERE t.id = a.trajectory_id)"
    )
    op.drop_index("ix_applied_events_trajectory_id", table_name="applied_events")
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("applied_events", recreate="always", table_kwargs={"sqlite_with_rowid": False}):
            pass


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("applied_events", recreate="always", table_kwargs={"sqlite_with_rowid": True}):
            pass
    op.create_index("ix_applied_events_trajectory_id", "applied_events", ["trajectory_id"])
    op.drop_table("purged_trajectories")  # (the ledger still names every purged trajectory's events)
    for table in CHILDREN:
        op.execute(
            f"DELETE FROM {table} WHERE NOT EXISTS (SELECT 1 FROM trajectories t WHERE t.id = {table}.trajectory_id)"
        )
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(
                f"fk_{table}_trajectory_id_trajectories", "trajectories", ["trajectory_id"], ["id"], ondelete="CASCADE"
            )
