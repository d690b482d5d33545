"""Migration 0005: steps and signals have no foreign key to trajectories any more (its per-row trigger was a
quarter of PostgreSQL's ingest CPU); the store keeps what it guaranteed: purges remove the children, also of
a batch that was appending to the trajectory at the same time, and the migration keeps the data."""

from __future__ import annotations

import threading
import time
from typing import Any

import sqlalchemy as sa
from alembic import command

from evolvable.protocol.models import MessageStep, StepAppended, events_for
from evolvable.store import Store, TrajectoryFilter, ingest, migrate
from evolvable.store.engine import WRITE_OPTIONS, create_engine
from evolvable.store.tables.trajectories import purged_trajectories, signals, steps, trajectories


def _foreign_keys(conn: sa.Connection) -> list[Any]:
    inspector = sa.inspect(conn)
    return [fk for table in ("steps", "signals") for fk in inspector.get_foreign_keys(table)]


def test_migration_keeps_the_rows_rolls_back_and_forward_and_turns_old_purges_into_tombstones(
    blank_db_url: str, make_trajectory
) -> None:
    engine = create_engine(blank_db_url)
    kept, purged_before = make_trajectory(), make_trajectory()
    try:
        with Store(engine) as store:
            migrate.upgrade(engine)
            store.put_trajectory(kept)
            store.put_trajectory(purged_before)
            with engine.begin() as conn:
                command.downgrade(migrate.alembic_config(conn), "0004_capture")
                assert len(_foreign_keys(conn)) == 2
                assert "purged_trajectories" not in sa.inspect(conn).get_table_names()
                # A purge as 0004 did it: the rows go, the ledger keeps the trajectory's event ids.
                for table in (steps, signals, trajectories):
                    column = table.c.id if table is trajectories else table.c.trajectory_id
                    conn.execute(sa.delete(table).where(column == purged_before.id))
            migrate.upgrade(engine)
            with engine.connect() as conn:
                assert migrate.current_revision(conn) == "0005_ingest" == migrate.head_revision()
                assert _foreign_keys(conn) == []
                assert conn.scalars(sa.select(purged_trajectories.c.id)).all() == [purged_before.id]
                assert conn.scalar(sa.select(sa.func.count()).select_from(steps)) == len(kept.steps)
            assert store.get_trajectory(kept.id) == kept
            late = StepAppended(trajectory_id=purged_before.id, step=MessageStep(content="late"))
            assert store.apply_events([late]) == 0  # the tombstone keeps it out
            assert store.apply_events(events_for(kept)) == 0
            with engine.begin() as conn:
                conn.execute(
                    sa.insert(steps).values(
                        trajectory_id="orphan", step_id="s", kind="message", body={}, started_at=kept.started_at
                    )
                )
                command.downgrade(migrate.alembic_config(conn), "0004_capture")
                # (rows no trajectory owns could not satisfy the key again: the downgrade drops them)
                assert conn.scalar(sa.select(sa.func.count()).select_from(steps)) == len(kept.steps)
            migrate.upgrade(engine)
            assert store.get_trajectory(kept.id) == kept
            assert store.delete_trajectories(TrajectoryFilter(ids=[kept.id])) == 1
            with engine.connect() as conn:
                for table in (steps, signals, trajectories):
                    assert conn.scalar(sa.select(sa.func.count()).select_from(table)) == 0
                assert set(conn.scalars(sa.select(purged_trajectories.c.id))) == {kept.id, purged_before.id}
    finally:
        engine.dispose()


def test_a_purge_waits_for_a_batch_appending_to_the_trajectory_and_removes_its_steps(
    store: Store, make_trajectory
) -> None:
    """The batch holds its parent (PostgreSQL: FOR KEY SHARE; SQLite: the one write transaction) until it
    commits; the purge then deletes the parent and every child, the batch's included."""
    t = make_trajectory()
    store.put_trajectory(t)
    late = [StepAppended(trajectory_id=t.id, step=MessageStep(content=f"late {i}")) for i in range(40)]
    purged: list[int] = []
    with store.engine.execution_options(**WRITE_OPTIONS).begin() as conn:
        assert ingest.apply(conn, late) == len(late)
        purge = threading.Thread(target=lambda: purged.append(store.delete_trajectories(TrajectoryFilter(ids=[t.id]))))
        purge.start()
        time.sleep(0.5)
        assert purge.is_alive()  # waiting for the batch
    purge.join(timeout=30)
    assert purged == [1]
    with store.engine.connect() as conn:
        for table in (steps, signals):
            assert conn.scalar(sa.select(sa.func.count()).where(table.c.trajectory_id == t.id)) == 0
    assert store.apply_events(events_for(t) + late) == 0  # purged: replays and late events stay out
