"""Multi-agent runs through the real proxy: sub-agents name themselves per call inside one session, get
their own harness, their steps and handoffs are recorded, and each evolves on its own side of the runs."""

from __future__ import annotations

from typing import Any

import httpx
from tests.control.test_proxy_integration import proxy_with_control
from tests.workloads.mock_openai import MockOpenAI
from tests.workloads.proxy_helpers import wait_for_store

from evolvable.control import ControlPlane, HarnessRouter
from evolvable.control.decision import DecisionConfig
from evolvable.control.models import DecisionState, Lever, VersionKind, VersionState
from evolvable.control.multi_agent import sub_agent_view, sub_agents_of
from evolvable.control.runtime import ControlConfig
from evolvable.protocol.harness import Harness
from evolvable.store import Store

PLANNER, WRITER = "planner", "writer"


def echo_system(messages: list[dict[str, Any]]) -> str:
    return messages[0]["content"] if messages[0]["role"] == "system" else "no system"


def session(url: str, i: int) -> tuple[list[str], str]:
    """planner -> writer -> planner in one session; the writer's step gets a failing verifier signal."""
    opened = httpx.post(
        f"{url}/sessions", json={"agent": PLANNER, "task_input": f"plan {i}", "metadata": {"cluster": "c"}}
    )
    s = opened.json()
    auth = {"authorization": f"Bearer {s['api_key']}"}
    seen, writer_step = [], None
    for who in (None, WRITER, None):
        headers = {**auth, **({"x-evolvable-agent": who} if who else {})}
        body = {"model": "m", "messages": [{"role": "user", "content": f"step of plan {i}"}]}
        reply = httpx.post(f"{url}/chat/completions", json=body, headers=headers, timeout=30)
        seen.append(reply.json()["choices"][0]["message"]["content"])
        if who == WRITER:
            writer_step = reply.headers["x-evolvable-step-id"]
    signal = {
        "kind": "verifier",
        "value": 0.0,
        "label": "too_vague",
        "step_id": writer_step,
        "metadata": {"reason": "be concrete"},
    }
    httpx.post(f"{url}/sessions/{s['id']}/signals", json={"signals": [signal]}, headers=auth).raise_for_status()
    httpx.post(
        f"{url}/sessions/{s['id']}/end", json={"status": "failed", "outcome": 0.0}, headers=auth
    ).raise_for_status()
    return seen, s["id"]


def test_sub_agents_in_one_session_each_get_their_own_harness_record_and_decisions(store: Store, tmp_path) -> None:
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    cfg = ControlConfig(decision=DecisionConfig(min_runs=10, levers=frozenset({Lever.skill})), use_canary=False)
    plane = ControlPlane(store, config=cfg, router=router)
    planner, _ = plane.bootstrap(Harness(agent=PLANNER, system_prompt="PLANNER v1"))
    writer, _ = plane.bootstrap(Harness(agent=WRITER, system_prompt="WRITER v1"))
    plane.register_sub_agent(WRITER, PLANNER)
    with (
        MockOpenAI(echo_system) as upstream,
        proxy_with_control(upstream.base_url, store, tmp_path, router, plane) as (
            url,
            runtime,
        ),
    ):
        seen, first = session(url, 0)
        assert seen == ["PLANNER v1", "WRITER v1", "PLANNER v1"]  # each call got its own agent's harness
        for i in range(1, 12):
            session(url, i)
        wait_for_store(runtime)
        t = store.get_trajectory(first)
        kinds = [(s.kind, s.agent) for s in t.steps]
        assert kinds == [
            ("llm_call", PLANNER),
            ("handoff", PLANNER),
            ("llm_call", WRITER),
            ("handoff", WRITER),
            ("llm_call", PLANNER),
        ]
        assert [(s.from_agent, s.to_agent) for s in t.steps if s.kind == "handoff"] == [
            (PLANNER, WRITER),
            (WRITER, PLANNER),
        ]
        assert t.harness_version == planner.id and t.steps[2].metadata["harness_version"] == writer.id
        assert sub_agents_of(t) == [WRITER]
        assert [s.kind for s in sub_agent_view(t, WRITER).steps] == ["handoff", "llm_call", "handoff"]

        writer_runs, planner_runs = plane.runs(WRITER), plane.runs(PLANNER)
        assert len(writer_runs) == len(planner_runs) == 12
        assert all(r.harness_version == writer.id and r.success is False for r in writer_runs)
        assert all(r.failure_labels == ["too_vague"] for r in writer_runs)  # the label is the writer's
        assert all(r.failure_labels == [] for r in planner_runs)  # credit: not the planner's step

        report = plane.tick()
        decisions = [plane.journal.decision(d) for d in report.decisions]
        assert [(d.agent, d.lever, d.state) for d in decisions] == [(WRITER, Lever.skill, DecisionState.promoted)]
        assert any(f"{PLANNER}: no change" in a for a in report.actions), str(report)
        new_writer = plane.registry.current(WRITER, VersionKind.harness, VersionState.active)
        assert new_writer.id == decisions[0].candidate_version
        assert plane.registry.current(PLANNER, VersionKind.harness, VersionState.active).id == planner.id
        seen, _ = session(url, 99)
    assert seen[0] == "PLANNER v1" and "be concrete" in seen[1]  # the writer's new skill, the planner unchanged


def test_sub_agents_from_otlp_invoke_agent_spans() -> None:
    """A trace with nested `invoke_agent` spans (OTLP ingestion) gives the same per-agent views."""
    from evolvable.protocol.converters.otel import from_otel

    def attr(key: str, value: str) -> dict:
        return {"key": key, "value": {"stringValue": value}}

    def span(sid: str, parent: str | None, start: int, operation: str, agent: str | None = None) -> dict:
        attrs = [attr("gen_ai.operation.name", operation)]
        attrs += [attr("gen_ai.agent.name", agent)] if agent else [attr("gen_ai.request.model", "m")]
        out = {
            "traceId": "5b8efff798038103d269b633813fc60d",
            "spanId": sid,
            "name": f"{operation} {agent or 'm'}",
            "startTimeUnixNano": str(1700000000000000000 + start * 10**8),
            "endTimeUnixNano": str(1700000000000000000 + (start + 1) * 10**8),
            "attributes": attrs,
        }
        return out | ({"parentSpanId": parent} if parent else {})

    spans = [
        span("a000000000000001", None, 0, "invoke_agent", PLANNER),
        span("a000000000000002", "a000000000000001", 1, "chat"),
        span("a000000000000003", "a000000000000001", 2, "invoke_agent", WRITER),
        span("a000000000000004", "a000000000000003", 3, "chat"),
    ]
    (t,) = from_otel({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
    assert sub_agents_of(t) == [WRITER]
    writer = sub_agent_view(t, WRITER)
    planner = sub_agent_view(t, PLANNER)
    assert [(s.kind, s.agent) for s in writer.steps if s.kind != "handoff"] == [("llm_call", WRITER)]
    assert any(s.kind == "handoff" and s.to_agent == WRITER for s in writer.steps)
    assert [s.kind for s in planner.steps] == ["llm_call", "handoff"]
    assert writer.agent == WRITER and writer.metadata["orchestrator"] == PLANNER
