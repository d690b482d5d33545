"""Registry: content addressing, the transition table, one active/canary, restore, lineage, diff."""

from __future__ import annotations

import pytest
from tests.control.conftest import AGENT, base_harness

from evolvable.control.models import TRANSITIONS, PolicySpec, VersionKind, VersionState
from evolvable.control.registry import Registry, diff_harnesses, render_diff
from evolvable.errors import ControlError, NotFound
from evolvable.protocol.harness import MemoryExemplar, Skill, ToolSpec
from evolvable.protocol.models import ChatMessage


def test_versions_are_content_addressed_and_idempotent(store) -> None:
    reg = Registry(store.engine)
    a = reg.register_harness(base_harness())
    again = reg.register_harness(base_harness())
    assert a.id == again.id == base_harness().content_hash()
    assert len(reg.versions(AGENT)) == 1
    assert a.state == VersionState.candidate and a.harness() == base_harness()


def test_transitions_follow_the_table_and_keep_one_active_and_one_canary(store) -> None:
    reg = Registry(store.engine)
    v1 = reg.register_harness(base_harness(), state=VersionState.active)
    v2 = reg.register_harness(base_harness().model_copy(update={"system_prompt": "v2"}))
    v3 = reg.register_harness(base_harness().model_copy(update={"system_prompt": "v3"}))
    assert v2.parent_id == v1.id  # lineage: the active version at registration
    with pytest.raises(ControlError):
        reg.transition(v2.id, VersionState.retired)  # candidate -> retired is not in the table
    assert VersionState.retired not in TRANSITIONS[VersionState.candidate]
    reg.start_canary(v2.id)
    with pytest.raises(ControlError, match="already has a harness canary"):
        reg.start_canary(v3.id)
    reg.promote(v2.id)
    assert reg.get(v1.id).state == VersionState.retired
    assert reg.current(AGENT, VersionKind.harness, VersionState.active).id == v2.id
    assert [t.to_state for t in reg.transitions(v1.id)] == [
        VersionState.candidate,
        VersionState.active,
        VersionState.retired,
    ]


def test_restore_any_earlier_version_in_one_step(store) -> None:
    reg = Registry(store.engine)
    v1 = reg.register_harness(base_harness(), state=VersionState.active)
    v2 = reg.register_harness(base_harness().model_copy(update={"system_prompt": "v2"}), state=VersionState.active)
    v3 = reg.register_harness(base_harness().model_copy(update={"system_prompt": "v3"}))
    reg.reject(v3.id)
    reg.restore(v1.id)
    assert reg.current(AGENT, VersionKind.harness, VersionState.active).id == v1.id
    assert reg.get(v2.id).state == VersionState.retired
    reg.restore(v3.id)  # even a rejected version comes back in one step
    assert reg.current(AGENT, VersionKind.harness, VersionState.active).id == v3.id
    assert [v.id for v in reg.lineage(v3.id)] == [v3.id, v2.id, v1.id]
    assert reg.resolve(AGENT, "active").id == v3.id
    assert reg.resolve(AGENT, v2.id[:10]).id == v2.id
    with pytest.raises(NotFound):
        reg.resolve(AGENT, "canary")


def test_policy_versions_carry_lineage(store) -> None:
    reg = Registry(store.engine)
    base = reg.register_policy(AGENT, PolicySpec(base_model="smollm2-135m"), state=VersionState.active)
    tuned = reg.register_policy(
        AGENT,
        PolicySpec(base_model="smollm2-135m", lora_name="desk-r1", adapter_path="/nonexistent/adapter"),
        parent=base.id,
        data_snapshot="ds_1",
        config={"lr": 1e-4},
        metrics={"holdout": 0.4},
    )
    assert tuned.id.startswith("p1-") and tuned.id != base.id and tuned.parent_id == base.id
    assert tuned.lineage == {"data_snapshot": "ds_1", "config": {"lr": 1e-4}, "metrics": {"holdout": 0.4}}
    assert tuned.policy().served_model == "desk-r1" and base.policy().served_model == "smollm2-135m"
    reg.start_canary(tuned.id)
    reg.promote(tuned.id)
    assert reg.current(AGENT, VersionKind.policy, VersionState.active).id == tuned.id
    assert reg.current(AGENT, VersionKind.harness, VersionState.active) is None


def test_diff_per_component() -> None:
    a = base_harness()
    ex = MemoryExemplar(
        id="ex1",
        cluster="refund",
        task_input="t",
        messages=[ChatMessage(role="user", content="t"), ChatMessage(role="assistant", content="a")],
    )
    b = a.model_copy(
        update={
            "system_prompt": "You are a support agent.\nAlways check the order first.",
            "skills": [Skill(name="handle_refund", instructions="check the window")],
            "memory": [ex],
            "tools": [
                *a.tools[:0],
                ToolSpec(name="lookup_order", description="Look up an order by its id."),
                ToolSpec(name="escalate", description="Escalate."),
            ],
            "memory_k": 2,
        }
    )
    d = diff_harnesses(a, b)
    assert "+Always check the order first." in d["system_prompt"]
    assert d["skills"]["added"] == ["handle_refund"] and d["memory"]["added"] == ["ex1"]
    assert d["tools"]["added"] == ["escalate"] and d["tools"]["changed"] == ["lookup_order"]
    assert d["settings"]["memory_k"] == {"a": 0, "b": 2}
    text = render_diff(d)
    assert "== tool lookup_order" in text and "+ handle_refund" in text
    assert render_diff(diff_harnesses(a, a)) == "(no differences)"
