"""A header changes through events only: `versions_named` fills the versions a run did not start with."""

from __future__ import annotations

from evolvable.protocol.models import MessageStep, StepAppended, TrajectoryStarted, VersionsNamed, events_for
from evolvable.store import Store, TrajectoryFilter


def test_versions_named_fills_only_unset_versions(store: Store, make_trajectory) -> None:
    t = make_trajectory(harness_version="h-start")
    store.put_trajectory(t)
    named = VersionsNamed(trajectory_id=t.id, harness_version="h-late", policy_version="p-late")
    assert store.apply_events([named]) == 1
    header = store.get_header(t.id)
    assert (header.harness_version, header.policy_version) == ("h-start", "p-late")
    assert store.count(TrajectoryFilter(policy_version="p-late")) == 1
    again = VersionsNamed(trajectory_id=t.id, policy_version="p-other")
    store.apply_events([again])
    assert store.get_header(t.id).policy_version == "p-late"


def test_versions_named_in_the_batch_of_the_start(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    named = VersionsNamed(event_id=f"{t.id}:versions", trajectory_id=t.id, harness_version="h1", policy_version="p1")
    assert store.apply_events([*events_for(t), named]) == len(events_for(t)) + 1
    assert store.apply_events([named]) == 0  # a replay
    header = store.get_header(t.id)
    assert (header.harness_version, header.policy_version) == ("h1", "p1")
    assert store.get_trajectory(t.id).steps == t.steps


def test_versions_named_before_the_start_survive_it(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    start = next(e for e in events_for(t) if isinstance(e, TrajectoryStarted))
    store.apply_events([StepAppended(trajectory_id=t.id, step=MessageStep(content="early"))])
    store.apply_events([VersionsNamed(trajectory_id=t.id, harness_version="h-early")])
    store.apply_events([start])
    header = store.get_header(t.id)
    assert (header.harness_version, header.agent) == ("h-early", t.agent)
