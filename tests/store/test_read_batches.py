"""`iter_trajectories` in keyset batches: every trajectory once, and a consumer that stops early leaves no
connection checked out."""

from __future__ import annotations

import pytest

from evolvable.protocol.models import Signal, SignalAttached, StepAppended, events_for
from evolvable.store import Store, TrajectoryFilter


def test_batches_yield_each_trajectory_once(store: Store, make_trajectory) -> None:
    originals = [make_trajectory() for _ in range(23)]
    store.apply_events([e for t in originals for e in events_for(t)])
    seen = [t.id for t in store.iter_trajectories(TrajectoryFilter(), batch_size=5)]
    assert sorted(seen) == sorted(t.id for t in originals) and len(seen) == len(set(seen))


def test_a_consumer_that_stops_early_leaves_no_connection_checked_out(store: Store, make_trajectory) -> None:
    store.apply_events([e for _ in range(12) for e in events_for(make_trajectory())])
    for _ in range(3):
        stream = store.iter_trajectories(TrajectoryFilter(), batch_size=4)
        assert next(stream).steps
        stream.close()
    assert store.engine.pool.checkedout() == 0
    assert store.count(TrajectoryFilter()) == 12


def test_both_read_paths_give_each_trajectory_whole_with_steps_in_arrival_order(store: Store, make_trajectory) -> None:
    """Steps of several runs arriving interleaved, a run without steps or signals, and a signal whose step has
    not arrived: the batched read (PostgreSQL joins the bodies on the server) and the read by id agree with
    what was written, across batch boundaries."""
    runs = [make_trajectory() for _ in range(7)]
    empty = make_trajectory().model_copy(update={"steps": [], "signals": []})
    store.apply_events([e for t in [*runs, empty] for e in events_for(t) if not isinstance(e, StepAppended)])
    waiting = Signal(kind="process", value=0.5, step_id="step_not_yet")
    store.apply_events([SignalAttached(trajectory_id=runs[0].id, signal=waiting)])
    longest = max(len(t.steps) for t in runs)
    interleaved = [
        StepAppended(trajectory_id=t.id, step=t.steps[i]) for i in range(longest) for t in runs if i < len(t.steps)
    ]
    store.apply_events(interleaved)

    by_batches = {t.id: t for t in store.iter_trajectories(TrajectoryFilter(), batch_size=3)}
    assert set(by_batches) == {t.id for t in [*runs, empty]}
    for written in [*runs, empty]:
        read = store.get_trajectory(written.id)
        assert by_batches[written.id] == read
        assert read.steps == written.steps and read.signals == written.signals
    assert waiting not in by_batches[runs[0].id].signals


def test_postgresql_sessions_run_without_jit(store: Store) -> None:
    """JIT compiled the training read's expressions for longer than the read ran (docs/PERFORMANCE.md)."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL setting")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW jit").scalar() == "off"
