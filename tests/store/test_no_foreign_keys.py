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
from evolvable.store.tables.trajectories import signals, steps, trajectories


def _foreign_keys(conn: sa.Connection) -> list[Any]:
    inspector = sa.inspect(conn)
    return [fk for table in ("steps", "signals") for fk in inspector.get_foreign_keys(table)]


def test_migration_drops_the_keys_keeps_the_rows_and_rolls_back_and_forward(blank_db_url: str, make_trajectory) -> None:
    engine = create_engine(blank_db_url)
    t = make_trajectory()
    try:
        with engine.begin() as conn:
            command.upgrade(migrate.alembic_config(conn), "0004_capture")
            assert len(_foreign_keys(conn)) == 2
        with Store(engine) as store:  # (the 0004 schema has the same columns)
            store.put_trajectory(t)
            migrate.upgrade(engine)
            with engine.connect() as conn:
                assert migrate.current_revision(conn) == "0005_ingest" == migrate.head_revision()
                assert _foreign_keys(conn) == []
                assert conn.scalar(sa.select(sa.func.count()).select_from(steps)) == len(t.steps)
            assert store.get_trajectory(t.id) == t
            with engine.begin() as conn:
                conn.execute(
                    sa.insert(steps).values(
                        trajectory_id="orphan", step_id="s", kind="message", body={}, started_at=t.started_at
                    )
                )
                command.downgrade(migrate.alembic_config(conn), "0004_capture")
                assert len(_foreign_keys(conn)) == 2
                # (rows no trajectory owns could not satisfy the key again: the downgrade drops them)
                assert conn.scalar(sa.select(sa.func.count()).select_from(steps)) == len(t.steps)
            migrate.upgrade(engine)
            assert store.get_trajectory(t.id) == t
            assert store.delete_trajectories(TrajectoryFilter(ids=[t.id])) == 1
            with engine.connect() as conn:
                for table in (steps, signals, trajectories):
                    assert conn.scalar(sa.select(sa.func.count()).select_from(table)) == 0
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
