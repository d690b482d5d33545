"""Replaying events is a no-op: across calls, within one batch, and after a purge."""

from __future__ import annotations

from tests.support.concurrent_writers import apply_from_writers

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
    # A later duplicate must not move an event: steps keep their first-seen order.
    assert store.apply_events([*events, events[3], events[1], events[0]]) == len(events)
    assert store.get_trajectory(t.id) == t


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
    # Each writer sends everything, in a different order and chunking.
    applied = apply_from_writers(store, events, writers=4, chunk=17, stride=31)
    assert sum(applied) == len(events)
    for t in trajectories:
        loaded = store.get_trajectory(t.id)
        assert {s.id for s in loaded.steps} == {s.id for s in t.steps}
        assert loaded.header() == t.header()


WRITER = """
import json, sys
from evolvable.store import Store
url, path, offset = sys.argv[1], sys.argv[2], int(sys.argv[3])
events = json.load(open(path))
events = events[offset:] + events[:offset]
store = Store.open(url)
applied = sum(store.apply_events(events[i : i + 25]) for i in range(0, len(events), 25))
store.close()
print(applied)
"""


def test_writer_processes_share_one_database(store: Store, make_trajectory, tmp_path) -> None:
    """E.g. the proxy's writer and a CLI import at once: separate processes, each event stored once."""
    import json
    import subprocess
    import sys

    trajectories = [make_trajectory() for _ in range(15)]
    events = [e.model_dump(mode="json") for t in trajectories for e in events_for(t)]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events))
    url = str(store.engine.url.render_as_string(hide_password=False))
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, url, str(path), str(k * 40)], stdout=subprocess.PIPE, text=True)
        for k in range(3)
    ]
    applied = [int(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(applied) == len(events)
    for t in trajectories:
        loaded = store.get_trajectory(t.id)  # steps in arrival order, which the rotation changed
        assert loaded.header() == t.header()
        assert sorted(s.id for s in loaded.steps) == sorted(s.id for s in t.steps)
        assert sorted(g.id for g in loaded.signals) == sorted(g.id for g in t.signals)
