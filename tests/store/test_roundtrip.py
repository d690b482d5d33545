"""Write and read back: whole trajectories, event streams in any order, late data."""

from __future__ import annotations

from datetime import timedelta

import pytest

from evolvable.errors import NotFound, ProtocolError, StoreError
from evolvable.protocol.models import (
    MessageStep,
    Signal,
    SignalAttached,
    StepAppended,
    TrajectoryEnded,
    TrajectoryStatus,
    events_for,
)
from evolvable.store import Store


def test_round_trip_of_every_step_kind(store: Store, make_trajectory) -> None:
    original = make_trajectory()
    store.put_trajectory(original)
    loaded = store.get_trajectory(original.id)
    assert loaded == original
    assert [s.kind for s in loaded.steps] == [
        "message",
        "llm_call",
        "tool_call",
        "handoff",
        "memory_op",
        "skill_use",
        "llm_call",
    ]
    assert loaded.llm_calls()[0].choices[0].logprobs == [-0.1, -0.25, -0.05]
    assert loaded.started_at.tzinfo is not None
    assert loaded.outcome() == 1.0


def test_late_signal_and_step_after_end_are_kept(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    store.put_trajectory(t)
    late = Signal(kind="user_feedback", value=-1.0, step_id=t.steps[-1].id, source="user", label="wrong")
    extra = MessageStep(role="environment", content="ticket reopened")
    assert (
        store.apply_events(
            [
                SignalAttached(trajectory_id=t.id, signal=late),
                StepAppended(trajectory_id=t.id, step=extra),
            ]
        )
        == 2
    )
    loaded = store.get_trajectory(t.id)
    assert loaded.status == TrajectoryStatus.completed
    assert loaded.signals[-1] == late
    assert loaded.steps[-1] == extra


def test_steps_before_their_start_make_a_placeholder_that_the_start_fills(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    events = events_for(t)
    start, rest = events[0], events[1:]
    # Everything but the start arrives first (e.g. another writer was slower); the end too.
    assert store.apply_events(rest) == len(rest)
    early = store.get_trajectory(t.id)
    assert [s.id for s in early.steps] == [s.id for s in t.steps]
    assert early.status == TrajectoryStatus.completed  # the end event was not lost
    store.apply_events([start])
    assert store.get_trajectory(t.id) == t


def test_events_in_one_batch_in_any_order(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    events = events_for(t)
    shuffled = [events[-1], *events[1:-1][::-1], events[0]]  # end first, start last
    store.apply_events(shuffled)
    loaded = store.get_trajectory(t.id)
    assert loaded.header() == t.header()
    assert {s.id for s in loaded.steps} == {s.id for s in t.steps}


def test_signal_on_a_step_that_has_not_arrived_appears_with_it(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    store.put_trajectory(t)
    step = MessageStep(content="follow-up")
    signal = Signal(kind="process", value=0.5, step_id=step.id)
    store.apply_events([SignalAttached(trajectory_id=t.id, signal=signal)])
    assert signal not in store.get_trajectory(t.id).signals
    store.apply_events([StepAppended(trajectory_id=t.id, step=step)])
    assert signal in store.get_trajectory(t.id).signals


def test_end_metadata_merges_and_last_end_wins(store: Store, make_trajectory) -> None:
    t = make_trajectory(status=TrajectoryStatus.running)
    store.put_trajectory(t)
    store.apply_events(
        [
            TrajectoryEnded(trajectory_id=t.id, status=TrajectoryStatus.abandoned, metadata={"reason": "timeout"}),
            TrajectoryEnded(trajectory_id=t.id, status=TrajectoryStatus.completed, metadata={"closed_by": "client"}),
        ]
    )
    loaded = store.get_trajectory(t.id)
    assert loaded.status == TrajectoryStatus.completed
    assert loaded.ended_at is not None
    assert loaded.metadata == {"intent": "order_status", "split": "train", "reason": "timeout", "closed_by": "client"}


def test_events_as_json_dicts_are_validated(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    raw = [e.model_dump(mode="json") for e in events_for(t)]
    assert store.apply_events(raw) == len(raw)
    assert store.get_trajectory(t.id) == t
    with pytest.raises(ProtocolError, match="invalid ATDP event"):
        store.apply_events([{"type": "step_appended", "trajectory_id": t.id, "step": {"kind": "nope"}}])


def test_event_for_another_tenants_trajectory_is_refused_whole(store: Store, make_trajectory) -> None:
    t = make_trajectory(tenant_id="acme")
    store.put_trajectory(t)
    good = StepAppended(trajectory_id=t.id, tenant_id="acme", step=MessageStep(content="ok"))
    evil = StepAppended(trajectory_id=t.id, tenant_id="globex", step=MessageStep(content="injected"))
    with pytest.raises(StoreError, match="another tenant"):
        store.apply_events([good, evil])
    assert len(store.get_trajectory(t.id).steps) == len(t.steps)  # nothing half-stored
    assert store.apply_events([good]) == 1  # the good event was not marked applied by the failed call


def test_tenant_scoped_get(store: Store, make_trajectory) -> None:
    t = make_trajectory(tenant_id="acme")
    store.put_trajectory(t)
    assert store.get_trajectory(t.id, tenant_id="acme").id == t.id
    assert store.get_header(t.id, tenant_id="acme").agent == "support"
    with pytest.raises(NotFound):
        store.get_trajectory(t.id, tenant_id="globex")
    with pytest.raises(NotFound):
        store.get_header(t.id, tenant_id="globex")
    with pytest.raises(NotFound):
        store.get_trajectory("traj_missing")


def test_find_step_by_client_ids(store: Store, make_trajectory) -> None:
    t = make_trajectory()
    store.put_trajectory(t)
    plan, tool = t.llm_calls()[0], t.tool_calls()[0]
    assert store.find_step(t.id, response_id=plan.response_id) == plan.id
    assert store.find_step(t.id, tool_call_id=tool.tool_call_id) == tool.id
    assert store.find_step(t.id, tool_call_id="call_unknown") is None
    assert store.find_step("traj_other", response_id=plan.response_id) is None
    with pytest.raises(StoreError):
        store.find_step(t.id)


def test_find_step_falls_back_to_the_llm_call_that_requested_the_tool(store: Store, make_trajectory) -> None:
    full = make_trajectory()
    t = full.model_copy(
        update={
            "steps": [s for s in full.steps if s.kind != "tool_call"],
            "signals": [g for g in full.signals if g.step_id is None],
        }
    )
    store.put_trajectory(t)
    plan = t.llm_calls()[0]
    call_id = plan.choices[0].message.tool_calls[0].id
    assert store.find_step(t.id, tool_call_id=call_id) == plan.id


def test_started_at_with_offsets_is_normalised_to_utc(store: Store, make_trajectory) -> None:
    from datetime import timezone

    t = make_trajectory()
    local = t.started_at.astimezone(timezone(timedelta(hours=5, minutes=30)))
    t.started_at = local
    store.put_trajectory(t)
    assert store.get_trajectory(t.id).started_at == local  # same instant
    assert store.get_trajectory(t.id).started_at.utcoffset() == timedelta(0)


def test_nul_characters_do_not_break_a_batch(store: Store, make_trajectory) -> None:
    """PostgreSQL's jsonb rejects NUL; tool output can contain it. Stored as U+FFFD on both backends."""
    t = make_trajectory()
    store.put_trajectory(t)
    odd = MessageStep(role="environment", content="binary\x00tail", metadata={"raw": "\\u0000 stays literal"})
    assert store.apply_events([StepAppended(trajectory_id=t.id, step=odd)]) == 1
    stored = store.get_trajectory(t.id).steps[-1]
    assert stored.content == "binary\ufffdtail"
    assert stored.metadata == {"raw": "\\u0000 stays literal"}
