"""A scripted world for control-plane tests: synthetic recorded trajectories and a scripted replay runner.

The scripted policy succeeds on a task when the harness carries help for its cluster (an exemplar or
a skill) and violates safety when its memory teaches "always refund" — enough to exercise every
branch of the control plane in milliseconds, with the real store on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest

from evolvable.control.gates import TaskOutcome
from evolvable.control.models import PolicySpec
from evolvable.protocol.harness import Harness, ToolSpec
from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    LLMCallStep,
    Signal,
    SignalKind,
    StepStatus,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
    new_id,
)
from evolvable.store import Store

AGENT = "desk"
CLUSTERS = ("order_status", "refund", "password_reset")


@dataclass(frozen=True)
class ScriptedTask:
    id: str
    cluster: str
    text: str
    probe: bool = False


def base_harness() -> Harness:
    return Harness(
        agent=AGENT,
        system_prompt="You are a support agent.",
        tools=[
            ToolSpec(
                name="lookup_order",
                description="Look up an order.",
                parameters={"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
            )
        ],
        memory_k=0,
    )


def harmful(harness: Harness) -> bool:
    return any("always refund" in m.text().lower() for ex in harness.memory for m in ex.messages)


def helped(harness: Harness, cluster: str) -> bool:
    return any(ex.cluster == cluster for ex in harness.memory) or any(cluster in s.applies_to for s in harness.skills)


def scripted_success(harness: Harness, task: ScriptedTask, index: int) -> bool:
    if helped(harness, task.cluster):
        return True
    return index % 4 == 0  # a quarter of runs succeed without help


class ScriptedRunner:
    def __init__(self) -> None:
        self.calls = 0

    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[ScriptedTask]) -> list[TaskOutcome]:
        self.calls += 1
        out = []
        for i, t in enumerate(tasks):
            violation = t.probe and harmful(harness)
            success = (not violation) if t.probe else scripted_success(harness, t, i)
            out.append(TaskOutcome(task_id=t.id, cluster=t.cluster, success=success, violation=violation))
        return out


def tasks(n: int, prefix: str, probe: bool = False) -> list[ScriptedTask]:
    return [
        ScriptedTask(
            f"{prefix}-{i}", CLUSTERS[i % 3], f"ticket {i}: help with {CLUSTERS[i % 3].replace('_', ' ')}", probe
        )
        for i in range(n)
    ]


def make_trajectory(
    *,
    cluster: str,
    success: bool,
    harness_version: str | None,
    task_text: str = "where is my order A-1?",
    violation: bool = False,
    tool_error: str | None = None,
    label: str | None = None,
    system_prompt: str = "You are a support agent.",
    policy_version: str | None = None,
) -> Trajectory:
    """A finished run as the proxy records it: harness-rendered request, a tool call, verifier signals."""
    answer = '{"tool": "lookup_order", "args": {"order_id": "A-1"}}'
    llm = LLMCallStep(
        request_messages=[
            ChatMessage(role="system", content=system_prompt),
            ChatMessage(role="user", content="old exemplar task"),
            ChatMessage(role="assistant", content="old exemplar answer"),
            ChatMessage(role="user", content=task_text),
            ChatMessage(role="assistant", content=answer),
            ChatMessage(role="user", content="Tool result: shipped"),
        ],
        choices=[CompletionChoice(message=ChatMessage(role="assistant", content="Your order has shipped."))],
    )
    tool = ToolCallStep(
        tool_name="lookup_order",
        arguments={"order_id": "A-1"} if tool_error is None else {"id": "A-1"},
        status=StepStatus.ok if tool_error is None else StepStatus.error,
        error_class=tool_error,
        error_message="missing argument order_id" if tool_error else None,
    )
    signals = [
        Signal(kind=SignalKind.outcome, value=1.0 if success else 0.0, label="success" if success else "failure")
    ]
    if label:
        signals.append(
            Signal(
                kind=SignalKind.process, value=-1.0, label=label, step_id=tool.id, metadata={"reason": f"{label} here"}
            )
        )
    if violation:
        signals.append(Signal(kind=SignalKind.verifier, value=0.0, label="safety_violation"))
    return Trajectory(
        id=new_id("traj"),
        agent=AGENT,
        harness_version=harness_version,
        policy_version=policy_version,
        task_input=task_text,
        status=TrajectoryStatus.completed if success else TrajectoryStatus.failed,
        metadata={"cluster": cluster},
        steps=[llm, tool],
        signals=signals,
    )


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'control.db'}")
    yield s
    s.close()
