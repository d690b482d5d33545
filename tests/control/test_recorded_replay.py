"""Replay from recorded traffic: recorded turns re-asked under a candidate harness (tool results fixed),
judged against the recorded reply, gated with the paired test; gate and report sets split by cluster."""

from __future__ import annotations

import json
import re

from tests.workloads.mock_openai import MockOpenAI

from evolvable.control.decision import DecisionConfig
from evolvable.control.judge import Judge
from evolvable.control.models import DecisionState, Lever, VersionKind, VersionState
from evolvable.control.recorded_replay import RecordedTrafficWorkload, conversation_of, split_of
from evolvable.control.runtime import ControlConfig, ControlPlane
from evolvable.control.workloads import WorkloadContext
from evolvable.protocol.harness import Harness
from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    LLMCallStep,
    Signal,
    SignalKind,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
)

AGENT = "notes"
CLUSTERS = ("summarize", "translate")
RULE = "Start every reply with the word CHECKED."


def recorded(i: int, cluster: str, harness_version: str | None = None) -> Trajectory:
    """A run as the proxy records it: the harness's system prompt, the task, a tool call and its result."""
    task = f"please {cluster} note {i}"
    tool = ToolCallStep(tool_name="fetch_note", arguments={"id": i}, result={"text": f"note {i}"})
    llm = LLMCallStep(
        request_messages=[
            ChatMessage(role="system", content="Old harness prompt."),
            ChatMessage(role="user", content=task),
            ChatMessage(role="assistant", content='{"tool": "fetch_note"}'),
            ChatMessage(role="tool", content=f"note {i}", tool_call_id="c1"),
        ],
        choices=[CompletionChoice(message=ChatMessage(role="assistant", content=f"done with note {i}"))],
    )
    return Trajectory(
        id=f"traj-recorded-{i:03d}",  # fixed ids: the gate/report split hashes them (7 of 16 in the gate)
        agent=AGENT,
        harness_version=harness_version,
        task_input=task,
        status=TrajectoryStatus.completed,
        metadata={"cluster": cluster},
        steps=[tool, llm],
        signals=[
            Signal(
                kind=SignalKind.judge, value=0.0, label="judged_failure", source="judge:j", metadata={"reason": RULE}
            )
        ],
    )


def agent_model(messages) -> str:
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    assert messages[-1]["role"] == "tool"  # the recorded tool result stays in the re-asked context
    return "CHECKED: summary" if "CHECKED" in system else "summary"


def judge_model(messages) -> str:
    new = re.search(r"New reply: (.*)", messages[-1]["content"]).group(1)
    return json.dumps({"score": 1.0 if new.startswith("CHECKED") else 0.0, "reason": RULE})


def fill(store, n: int = 16, harness_version: str | None = None) -> None:
    for i in range(n):
        store.put_trajectory(recorded(i, CLUSTERS[i % 2], harness_version))


def test_conversation_drops_the_harness_and_keeps_tool_results() -> None:
    t = recorded(3, "summarize")
    conversation = conversation_of(t.steps[1].request_messages, t.task_input)
    assert [m.role for m in conversation] == ["user", "assistant", "tool"]


def test_gate_and_report_sets_are_disjoint_per_cluster_and_stable(store) -> None:
    fill(store, 40)
    workload = RecordedTrafficWorkload(store, None, AGENT, judge=Judge("http://127.0.0.1:9/v1", "j"), per_cluster=50)
    gate, report = workload.split()
    assert {t.id for t in gate}.isdisjoint({t.id for t in report})
    assert len(gate) + len(report) == 40
    assert {t.cluster for t in gate} == {t.cluster for t in report} == set(CLUSTERS)
    assert all(split_of(t.id, 0.5) == "gate" for t in gate)
    assert [t.id for t in workload.split()[0]] == [t.id for t in gate]


def test_a_candidate_is_gated_by_recorded_replay_and_the_judge(store) -> None:
    with MockOpenAI(agent_model) as model, MockOpenAI(judge_model) as judge_server:
        judge = Judge(judge_server.base_url, "j")
        cfg = ControlConfig(decision=DecisionConfig(min_runs=10, levers=frozenset({Lever.skill})), use_canary=False)
        plane = ControlPlane(store, config=cfg)
        active, _ = plane.bootstrap(Harness(agent=AGENT, system_prompt="You manage notes."))
        fill(store, harness_version=active.id)
        workload = RecordedTrafficWorkload(store, None, AGENT, judge=judge)
        suite = workload.suite(WorkloadContext(model.base_url, "m"))
        plane.register_suite(AGENT, suite)
        report = plane.tick()
        gate_ids = {t.id for t in suite.holdout}
        asked = len(model.chat_requests)
    decision = plane.journal.decision(report.decisions[0])
    assert decision.state == DecisionState.promoted, (decision.gates, str(report))
    n = len(gate_ids)
    assert (
        f"holdout {n}/{n}" in decision.gates["replay"]["reason"] and f"vs 0/{n}" in decision.gates["replay"]["reason"]
    )
    assert asked == 2 * n  # one re-asked turn per gate task, for the candidate and the active version
    assert gate_ids.isdisjoint({t.id for t in suite.report}) and suite.report
    active = plane.registry.current(AGENT, VersionKind.harness, VersionState.active)
    assert active.id == decision.candidate_version


def test_a_judge_that_cannot_score_stops_the_candidate(store) -> None:
    with MockOpenAI(agent_model) as model, MockOpenAI(lambda m: "no idea") as judge_server:
        cfg = ControlConfig(decision=DecisionConfig(min_runs=10, levers=frozenset({Lever.skill})), use_canary=False)
        plane = ControlPlane(store, config=cfg)
        active, _ = plane.bootstrap(Harness(agent=AGENT, system_prompt="You manage notes."))
        fill(store, harness_version=active.id)
        workload = RecordedTrafficWorkload(store, None, AGENT, judge=Judge(judge_server.base_url, "j"))
        plane.register_suite(AGENT, workload.suite(WorkloadContext(model.base_url, "m")))
        report = plane.tick()
    decision = plane.journal.decision(report.decisions[0])
    assert decision.state == DecisionState.gated_out
    assert "the judge could not score" in decision.gates["replay"]["reason"]
    assert plane.registry.get(decision.candidate_version).state == VersionState.rejected
