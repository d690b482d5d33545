"""Bulk batches (the proxy writer's and importers' path): COPY on PostgreSQL, executemany on SQLite.

Batches here are above `ingest.COPY_MIN_ROWS`, so PostgreSQL takes the COPY path, including its
fallback when a row is already stored.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from tests.support.concurrent_writers import apply_from_writers

from evolvable.protocol.models import (
    MessageStep,
    Signal,
    SignalAttached,
    StepAppended,
    Trajectory,
    TrajectoryEnded,
    TrajectoryStatus,
    events_for,
)
from evolvable.store import Store, TrajectoryFilter, ingest, sqlite_bulk
from evolvable.store.engine import create_engine
from evolvable.store.tables.trajectories import steps

MANY = ingest.COPY_MIN_ROWS * 3


def chatty(make_trajectory, n_messages: int = MANY) -> Trajectory:
    t = make_trajectory()
    start = t.started_at
    extra = [MessageStep(content=f"turn {i}", started_at=start + timedelta(milliseconds=i)) for i in range(n_messages)]
    return t.model_copy(update={"steps": [*t.steps, *extra]})


def test_a_bulk_batch_round_trips_in_arrival_order(store: Store, make_trajectory) -> None:
    trajectories = [chatty(make_trajectory) for _ in range(3)]
    events = [e for t in trajectories for e in events_for(t)]
    assert store.apply_events(events) == len(events)
    for t in trajectories:
        assert store.get_trajectory(t.id) == t
    assert store.apply_events(events) == 0


def test_bulk_steps_already_stored_under_other_event_ids_are_kept_once(store: Store, make_trajectory) -> None:
    t = chatty(make_trajectory)
    events = events_for(t)
    steps = [e for e in events if isinstance(e, StepAppended)]
    store.apply_events([e for e in events if not isinstance(e, StepAppended)] + steps[: MANY // 2])
    # The same steps again under fresh event ids (a client that retried), mixed with new ones.
    retried = [StepAppended(trajectory_id=t.id, step=e.step) for e in steps]
    assert store.apply_events(retried) == len(retried)  # new event ids: claimed, but the rows exist
    stored = store.get_trajectory(t.id)
    assert [s.id for s in stored.steps] == [s.id for s in t.steps]
    assert stored == t


def test_bulk_signals_and_late_steps(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    store.put_trajectory(t)
    signals = [Signal(kind="user_feedback", value=i / MANY, step_id=t.steps[0].id) for i in range(MANY)]
    late = [MessageStep(content=f"late {i}") for i in range(MANY)]
    events = [SignalAttached(trajectory_id=t.id, signal=s) for s in signals]
    events += [StepAppended(trajectory_id=t.id, step=s) for s in late]
    assert store.apply_events(events) == 2 * MANY
    stored = store.get_trajectory(t.id)
    assert stored.signals[len(t.signals) :] == signals
    assert stored.steps[len(t.steps) :] == late


def test_bulk_rows_with_nul_and_offset_times_are_stored_faithfully(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    store.put_trajectory(t)
    local = datetime(2026, 11, 3, 9, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    odd = [MessageStep(content=f"bin\x00ary {i}\ttab\\n", started_at=local) for i in range(MANY)]
    store.apply_events([StepAppended(trajectory_id=t.id, step=s) for s in odd])
    stored = store.get_trajectory(t.id).steps[len(t.steps) :]
    assert [s.content for s in stored] == [f"bin\ufffdary {i}\ttab\\n" for i in range(MANY)]
    assert {s.started_at for s in stored} == {local}
    with store.engine.connect() as conn:
        column = conn.scalars(sa.select(steps.c.started_at).where(steps.c.step_id.in_([s.id for s in odd]))).all()
    assert set(column) == {local.astimezone(UTC)} and len(column) == MANY


def test_bulk_rows_with_naive_times_are_stored_as_utc(store: Store, make_trajectory) -> None:
    """A naive timestamp means UTC (as `UTCDateTime` binds it); PostgreSQL's binary COPY needs it made aware."""
    t = make_trajectory()
    store.put_trajectory(t)
    naive = datetime(2026, 11, 3, 9, 30, 0, 250)
    aware = datetime(2026, 11, 3, 9, 30, tzinfo=timezone(timedelta(hours=2)))
    mixed = [MessageStep(content=str(i), started_at=naive if i % 2 else aware) for i in range(MANY)]
    store.apply_events([StepAppended(trajectory_id=t.id, step=s) for s in mixed])
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(steps.c.step_id, steps.c.started_at).where(steps.c.step_id.in_([s.id for s in mixed]))
        ).all()
    stored = dict(rows)
    assert len(stored) == MANY
    assert all(stored[s.id] == (naive.replace(tzinfo=UTC) if i % 2 else aware) for i, s in enumerate(mixed))


def test_concurrent_bulk_writers_apply_each_event_once(store: Store, make_trajectory) -> None:
    trajectories = [chatty(make_trajectory, n_messages=40) for _ in range(6)]
    events = [e for t in trajectories for e in events_for(t)]
    applied = apply_from_writers(store, events, writers=3, chunk=90, stride=45)
    assert sum(applied) == len(events)
    for t in trajectories:  # arrival order depends on which writer came first; the content does not
        loaded = store.get_trajectory(t.id)
        assert sorted(loaded.steps, key=lambda s: s.id) == sorted(t.steps, key=lambda s: s.id)
        assert sorted(loaded.signals, key=lambda g: g.id) == sorted(t.signals, key=lambda g: g.id)
        assert loaded.header() == t.header()
    assert store.count(TrajectoryFilter()) == len(trajectories)


def test_postgresql_documents_are_lz4_compressed(store: Store) -> None:
    """Migration 0003: pglz on every ~1-2 kB JSONB step body cost half of ingest (docs/PERFORMANCE.md)."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL storage setting")
    with store.engine.connect() as conn:
        if int(conn.exec_driver_sql("SHOW server_version_num").scalar_one()) < 140000:
            pytest.skip("column compression methods need PostgreSQL 14")
        methods = conn.execute(
            sa.text(
                "SELECT attrelid::regclass::text, attcompression FROM pg_attribute "
                "WHERE (attrelid, attname) IN (('steps'::regclass, 'body'), ('signals'::regclass, 'body'), "
                "('trajectories'::regclass, 'header'))"
            )
        ).all()
    assert sorted(methods) == [("signals", "l"), ("steps", "l"), ("trajectories", "l")]


def test_postgresql_bodies_are_json_text_and_replays_fall_back_from_optimistic_copy(
    store: Store, make_trajectory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 0004: bodies are `json` (no jsonb parse per insert); a big batch goes through COPY without
    savepoints first, and a replay of it conflicts, rolls back and is applied again the careful way."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL storage setting")
    with store.engine.connect() as conn:
        types = conn.execute(
            sa.text(
                "SELECT attrelid::regclass::text, atttypid::regtype::text FROM pg_attribute "
                "WHERE (attrelid, attname) IN (('steps'::regclass, 'body'), ('signals'::regclass, 'body'))"
            )
        ).all()
    assert sorted(types) == [("signals", "json"), ("steps", "json")]
    calls: list[bool] = []
    real_apply = ingest.apply

    def spy(conn: sa.Connection, events: list[object], *, optimistic: bool = False) -> int:
        calls.append(optimistic)
        return real_apply(conn, events, optimistic=optimistic)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest, "apply", spy)
    t = chatty(make_trajectory)
    events = events_for(t)
    assert store.apply_events(events) == len(events)
    assert calls == [True]
    replayed = [StepAppended(trajectory_id=t.id, step=e.step) for e in events if isinstance(e, StepAppended)]
    assert store.apply_events(replayed) == len(replayed)  # new event ids, stored steps: COPY conflicts
    assert calls == [True, True, False]
    assert store.get_trajectory(t.id) == t


def test_ends_in_the_batch_of_their_start_equal_ends_applied_later(db_url: str, make_trajectory) -> None:
    """Ends folded into the inserted row (one batch) give the same row as ends applied by UPDATE (two batches)."""
    t = make_trajectory(status=TrajectoryStatus.running)
    ends = [
        TrajectoryEnded(trajectory_id=t.id, status=TrajectoryStatus.abandoned, metadata={"reason": "timeout"}),
        TrajectoryEnded(trajectory_id=t.id, status=TrajectoryStatus.completed, metadata={"closed_by": "client"}),
    ]
    with Store.open(db_url) as store:
        assert store.apply_events([ends[0], *events_for(t), ends[1]]) == len(events_for(t)) + 2
        folded = store.get_trajectory(t.id)
        store.delete_trajectories(TrajectoryFilter(ids=[t.id]))
        again = t.model_copy(update={"id": "traj_again"})
        store.apply_events(events_for(again))
        store.apply_events(
            [e.model_copy(update={"trajectory_id": again.id, "event_id": e.event_id + "b"}) for e in ends]
        )
        updated = store.get_trajectory(again.id)
    assert folded.status == TrajectoryStatus.completed and folded.ended_at == ends[1].ended_at
    assert folded.metadata == {"intent": "order_status", "split": "train", "reason": "timeout", "closed_by": "client"}
    assert folded.model_copy(update={"id": again.id, "ended_at": None}) == updated.model_copy(update={"ended_at": None})


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 11, 3, 9, 30, tzinfo=UTC),
        datetime(2026, 11, 3, 9, 30, 0, 7, tzinfo=timezone(timedelta(hours=-7))),
        datetime(2026, 1, 1),
        None,
    ],
)
def test_sqlite_fast_datetime_text_equals_sqlalchemys(value: datetime | None) -> None:
    """The bulk path writes the exact text SQLAlchemy's UTCDateTime would (range filters compare text)."""
    engine = create_engine("sqlite://")
    process = steps.c.started_at.type.dialect_impl(engine.dialect).bind_processor(engine.dialect)
    assert sqlite_bulk.sqlite_utc_text(value) == process(value)
    engine.dispose()


def test_sqlite_header_rows_equal_what_sqlalchemys_insert_writes(tmp_path, make_trajectory) -> None:
    """New trajectories' rows go through the driver's executemany on SQLite: byte for byte the row SQLAlchemy's
    INSERT writes (datetimes as text, the header document as JSON, booleans as integers, NULLs)."""
    from evolvable.store.rows import header_row
    from evolvable.store.tables.trajectories import trajectories

    ended = make_trajectory()
    running = make_trajectory(status=TrajectoryStatus.running)
    naive = make_trajectory().model_copy(update={"started_at": datetime(2026, 1, 2, 3, 4, 5)})
    rows = [header_row(t.header()) for t in (ended, running, naive)]
    rows[0]["status"], rows[0]["ended_at"] = (
        "completed",
        datetime(2026, 11, 3, 9, 30, tzinfo=timezone(timedelta(hours=2))),
    )
    stored = []
    for fast in (True, False):
        with Store.open(f"sqlite:///{tmp_path / f'fast-{fast}.db'}") as store, store.engine.begin() as conn:
            copies = [{**row, "header": dict(row["header"])} for row in rows]
            if fast:
                sqlite_bulk.insert_or_ignore(conn, trajectories, copies)
            else:
                conn.execute(ingest.dialect_insert(conn, trajectories).on_conflict_do_nothing(), copies)
            stored.append(conn.exec_driver_sql("SELECT * FROM trajectories ORDER BY id").fetchall())
    assert len(stored[0]) == 3
    assert stored[0] == stored[1]


def test_ends_of_many_trajectories_in_one_batch_each_land_on_their_own(db_url: str, make_trajectory) -> None:
    """A batch ending trajectories opened earlier (a session's end arrives after its start) sets each its own
    status, end time (naive means UTC; other zones converted) and merged metadata, and touches no other."""
    runs = [make_trajectory(status=TrajectoryStatus.running) for _ in range(5)]
    naive = datetime(2026, 11, 27, 9, 30, 0, 7)  # naive means UTC, as everywhere in the store
    away = datetime(2026, 11, 27, 4, 30, tzinfo=timezone(timedelta(hours=-7)))
    ends = [
        TrajectoryEnded(trajectory_id=runs[0].id, status=TrajectoryStatus.completed, ended_at=naive),
        TrajectoryEnded(
            trajectory_id=runs[1].id, status=TrajectoryStatus.abandoned, ended_at=away, metadata={"why": "idle"}
        ),
        TrajectoryEnded(trajectory_id=runs[2].id, status=TrajectoryStatus.failed, metadata={"note": "nul \x00 here"}),
        TrajectoryEnded(trajectory_id=runs[2].id, status=TrajectoryStatus.completed, metadata={"closed_by": "client"}),
    ]
    with Store.open(db_url) as store:
        for t in runs:
            store.apply_events(events_for(t))
        assert store.apply_events(ends) == len(ends)
        stored = {t.id: store.get_trajectory(t.id) for t in runs}
    assert stored[runs[0].id].status == TrajectoryStatus.completed
    assert stored[runs[0].id].ended_at == naive.replace(tzinfo=UTC)
    assert stored[runs[1].id].status == TrajectoryStatus.abandoned
    assert stored[runs[1].id].ended_at == datetime(2026, 11, 27, 11, 30, tzinfo=UTC)
    assert stored[runs[1].id].metadata == {**runs[1].metadata, "why": "idle"}
    assert stored[runs[2].id].status == TrajectoryStatus.completed  # the last end of the batch wins
    assert stored[runs[2].id].metadata == {**runs[2].metadata, "note": "nul \ufffd here", "closed_by": "client"}
    for untouched in runs[3:]:
        assert stored[untouched.id] == untouched
