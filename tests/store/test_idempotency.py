"""Replaying events is a no-op: across calls, within one batch, and after a purge."""

from __future__ import annotations

import threading

from evolvable.protocol.models import MessageStep, Signal, SignalAttached, StepAppended, events_for
from evolvable.store import Store, TrajectoryFilter


def test_reapplying_the_same_events_changes_nothing(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    events = events_for(t)
    assert store.apply_events(events) == len(events)
    assert store.apply_events(events) == 0
    store.put_trajectory(t)
    loaded = store.get_trajectory(t.id)
    assert loaded == t
    assert len(loaded.steps) == len(t.steps) and len(loaded.signals) == len(t.signals)


def test_duplicates_within_one_batch_apply_once(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    events = events_for(t)
    assert store.apply_events(events + events[1:3] + events) == len(events)
    assert len(store.get_trajectory(t.id).steps) == len(t.steps)


def test_same_event_id_with_other_content_is_still_a_replay(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    store.put_trajectory(t)
    first = StepAppended(event_id="evt_fixed", trajectory_id=t.id, step=MessageStep(content="first"))
    second = StepAppended(event_id="evt_fixed", trajectory_id=t.id, step=MessageStep(content="second"))
    assert store.apply_events([first]) == 1
    assert store.apply_events([second]) == 0
    assert [s.content for s in store.get_trajectory(t.id).steps if s.kind == "message"][-1] == "first"


def test_a_step_id_sent_twice_under_new_event_ids_is_stored_once(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    store.put_trajectory(t)
    step = MessageStep(content="retry me")
    store.apply_events([StepAppended(trajectory_id=t.id, step=step)])
    store.apply_events([StepAppended(trajectory_id=t.id, step=step)])  # a client retry with a fresh event id
    assert [s.id for s in store.get_trajectory(t.id).steps].count(step.id) == 1


def test_replayed_events_do_not_resurrect_a_purged_trajectory(store: Store, make_trajectory) -> None:
    t = make_trajectory(end_user="alice")
    events = events_for(t)
    store.apply_events(events)
    assert store.delete_trajectories(TrajectoryFilter(end_user="alice")) == 1
    assert store.apply_events(events) == 0  # a spool replay after the purge
    late = Signal(kind="user_feedback", value=1.0)
    assert store.apply_events([SignalAttached(trajectory_id=t.id, signal=late)]) == 0  # late feedback, new id
    assert store.count(TrajectoryFilter(ids=[t.id])) == 0


def test_concurrent_writers_apply_each_event_once(store: Store, make_trajectory) -> None:
    trajectories = [make_trajectory() for _ in range(20)]
    events = [e for t in trajectories for e in events_for(t)]
    applied: list[int] = []
    errors: list[BaseException] = []

    def write(chunk_start: int) -> None:
        try:
            # Each writer sends everything, in a different order and chunking.
            order = events[chunk_start:] + events[:chunk_start]
            for i in range(0, len(order), 17):
                applied.append(store.apply_events(order[i : i + 17]))
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=write, args=(k * 31,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert sum(applied) == len(events)
    for t in trajectories:
        loaded = store.get_trajectory(t.id)
        assert {s.id for s in loaded.steps} == {s.id for s in t.steps}
        assert loaded.header() == t.header()
