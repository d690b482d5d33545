"""The in-process SDK writes through the store, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import evolvable
from evolvable.protocol.models import ChatMessage, CompletionChoice, TrajectoryStatus
from evolvable.sdk import trajectory
from evolvable.store import Store, TrajectoryFilter


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url)
    yield s
    s.close()


def test_a_recorded_run_reads_back_step_by_step(store: Store) -> None:
    with evolvable.trajectory(
        agent="support", task_input={"ticket": "refund?"}, store=store, tenant_id="acme", end_user="u1", task_id="t-9"
    ) as t:
        t.message(role="user", content="I want a refund")
        call = t.llm_call(
            model="smollm2-135m",
            request_messages=[ChatMessage(role="user", content="I want a refund")],
            choices=[CompletionChoice(message=ChatMessage(role="assistant", content="Sure."), finish_reason="stop")],
            response_id="chatcmpl-1",
        )
        tool = t.tool_call(
            tool_name="refund", arguments={"order": 7}, result="done", status="ok", parent_step_id=call.id
        )
        t.handoff(from_agent="support", to_agent="billing")
        t.signal("process", 1.0, step=tool, source="verifier")
        t.signal("outcome", 1.0)
    loaded = store.get_trajectory(t.id, tenant_id="acme")
    assert loaded.status == TrajectoryStatus.completed and loaded.ended_at is not None
    assert [s.kind for s in loaded.steps] == ["message", "llm_call", "tool_call", "handoff"]
    assert loaded.steps[1] == call and loaded.steps[2].parent_step_id == call.id
    assert loaded.signals[0].step_id == tool.id
    assert loaded.outcome() == 1.0
    assert (loaded.agent, loaded.end_user, loaded.task_id, loaded.task_input) == (
        "support",
        "u1",
        "t-9",
        {"ticket": "refund?"},
    )
    assert store.find_step(t.id, response_id="chatcmpl-1") == call.id


def test_an_escaping_exception_fails_the_run_and_is_reraised(store: Store) -> None:
    with pytest.raises(RuntimeError, match="tool crashed"), trajectory(agent="a", store=store) as t:
        t.tool_call(tool_name="x", status="error", error_class="RuntimeError")
        raise RuntimeError("tool crashed")
    loaded = store.get_trajectory(t.id)
    assert loaded.status == TrajectoryStatus.failed
    assert loaded.metadata["error"] == {"type": "RuntimeError", "message": "tool crashed"}


def test_explicit_end_and_late_signal_after_the_block(store: Store) -> None:
    with trajectory(agent="a", store=store, metadata={"intent": "refund"}) as t:
        t.end("abandoned", reason="user left")
    t.signal("user_feedback", -1.0, label="slow")  # feedback arrives later
    loaded = store.get_trajectory(t.id)
    assert loaded.status == TrajectoryStatus.abandoned
    assert loaded.metadata == {"intent": "refund", "reason": "user left"}
    assert [g.kind for g in loaded.signals] == ["user_feedback"]
    assert store.count(TrajectoryFilter(agent="a", has_outcome=False)) == 1


def test_steps_are_durable_before_the_block_ends(store: Store) -> None:
    with trajectory(agent="a", store=store) as t:
        t.memory_op(op="retrieve", key="k", items=[1])
        t.skill_use(skill_name="s")
        during = store.get_trajectory(t.id)
        assert during.status == TrajectoryStatus.running and len(during.steps) == 2


def test_default_store_comes_from_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOLVABLE_HOME", str(tmp_path))
    monkeypatch.delenv("EVOLVABLE_DB", raising=False)
    with trajectory(agent="local", direct=True) as t:
        t.message(content="hi")
    store = Store.open(f"sqlite:///{tmp_path / 'evolvable.db'}")
    try:
        assert store.get_trajectory(t.id).steps[0].content == "hi"
    finally:
        store.close()


def test_bad_step_fields_raise_before_anything_is_written(store: Store) -> None:
    from pydantic import ValidationError

    with trajectory(agent="a", store=store) as t, pytest.raises(ValidationError):
        t.tool_call(tool_name="x", no_such_field=1)
    assert store.get_trajectory(t.id).steps == []


def test_direct_mode_applies_the_governance_pipeline(store: Store) -> None:
    with trajectory(agent="a", store=store) as t:
        t.message(content="reach me at ann@example.com")
    (step,) = store.get_trajectory(t.id).steps
    assert "ann@example.com" not in step.content and step.content.startswith("reach me at ")


def test_direct_mode_honours_a_tenants_metadata_only_consent(store: Store) -> None:
    from evolvable.governance.tenants import TenantDirectory

    TenantDirectory(store.engine).create_tenant("quiet", capture="metadata")
    with trajectory(agent="a", store=store, tenant_id="quiet") as t:
        t.message(content="private words")
    (step,) = store.get_trajectory(t.id).steps
    assert step.content in (None, "", [])
