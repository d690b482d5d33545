"""The agent loop and evaluation against a scripted OpenAI-compatible server, through the real openai client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from tests.workloads.mock_openai import MockOpenAI

from evolvable.errors import UpstreamError
from evolvable.workloads.support_desk import (
    Task,
    default_harness,
    evaluate,
    generate_tasks,
    oracle_exemplars,
    oracle_outputs,
    run_episode,
    weak_harness,
)

TASKS = generate_tasks("holdout", 12, seed=11) + generate_tasks("safety", 4, seed=11)
BY_PROMPT = {t.prompt(): t for t in TASKS}


def oracle(messages: list[dict[str, Any]]) -> str:
    """Answer like a perfect agent: find the live ticket (the last one; exemplars come before it)."""
    start = max(i for i, m in enumerate(messages) if m["role"] == "user" and m["content"] in BY_PROMPT)
    task = BY_PROMPT[messages[start]["content"]]
    done = sum(1 for m in messages[start:] if m["role"] == "assistant")
    return oracle_outputs(task)[done]


@pytest.fixture
def server() -> Iterator[MockOpenAI]:
    with MockOpenAI(oracle) as mock:
        yield mock


@pytest.fixture
def proxy() -> Iterator[MockOpenAI]:
    with MockOpenAI(oracle, proxy=True) as mock:
        yield mock


def client_for(mock: MockOpenAI) -> openai.OpenAI:
    return openai.OpenAI(base_url=mock.base_url, api_key="tenant-key", max_retries=0)


def task_of(intent: str) -> Task:
    return next(t for t in TASKS if t.intent == intent)


def test_episode_runs_tools_and_feeds_observations_back(server: MockOpenAI) -> None:
    task = task_of("refund_in_policy")
    result = run_episode(client_for(server), "m", task, default_harness(), proxy_session=False, seed=5)
    assert result.success and result.reward == 1.0 and result.error is None
    assert [t.tool for t in result.turns] == ["lookup_order", "issue_refund", "reply_to_customer"]
    assert len(server.chat_requests) == 3
    first, last = server.chat_requests[0], server.chat_requests[-1]
    assert first["messages"][0]["role"] == "system" and "JSON" in first["messages"][0]["content"]
    assert first["max_tokens"] == 64 and first["temperature"] == 0.0 and first["seed"] == 5
    # The conversation grows: ticket, action, observation, action, observation.
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert last["messages"][3]["content"].startswith("Result: {")
    assert json.loads(last["messages"][3]["content"][len("Result: ") :])["refund_eligible"] is True
    # The local ATDP record: llm_call and tool_call steps, linked, with signals.
    traj = result.trajectory
    assert [s.kind for s in traj.steps] == ["llm_call", "tool_call"] * 3
    assert traj.tool_calls()[0].llm_step_id == traj.llm_calls()[0].id
    assert traj.outcome() == 1.0 and traj.status == "completed"
    assert traj.metadata["cluster"] == "refund_in_policy"
    assert result.harness_version == default_harness().content_hash()


def test_memory_exemplars_come_before_the_ticket(server: MockOpenAI) -> None:
    task = task_of("order_status")
    harness = default_harness(oracle_exemplars(generate_tasks("train", 12, seed=0)))
    run_episode(client_for(server), "m", task, harness, proxy_session=False)
    messages = server.chat_requests[0]["messages"]
    tickets = [m["content"] for m in messages if m["role"] == "user" and m["content"].startswith("Ticket from")]
    assert len(tickets) == 3 and tickets[-1] == task.prompt()
    assert "lookup_order" in messages[2]["content"]  # a same-intent exemplar is retrieved first


def test_failed_episode_stops_at_max_turns_with_format_errors() -> None:
    with MockOpenAI(lambda _: '{"tool": lookup') as mock:
        result = run_episode(client_for(mock), "m", task_of("order_status"), weak_harness(), proxy_session=False)
    assert len(result.turns) == 4 and not result.success
    assert [s.label for s in result.verdict.steps] == ["format_error"] * 4
    assert "FormatError" in mock.chat_requests[-1]["messages"][-1]["content"]


def test_proxy_session_reports_steps_signals_and_end(proxy: MockOpenAI) -> None:
    task = task_of("refund_out_of_policy")
    result = run_episode(client_for(proxy), "m", task, default_harness())  # auto-detects the proxy
    assert result.success and result.session_id in proxy.sessions and not result.report_errors
    session = proxy.sessions[result.session_id]
    assert session["open"]["metadata"] == {"intent": task.intent, "split": "holdout", "cluster": task.intent}
    assert session["open"]["task_id"] == task.id and session["open"]["agent"] == "support-desk"
    assert session["auth"] == "Bearer tenant-key"
    # Model calls carry the session key.
    assert set(proxy.chat_auth) == {f"Bearer {session['key']}"}
    assert [s["kind"] for s in session["steps"]] == ["tool_call", "tool_call"]
    assert [s["tool_name"] for s in session["steps"]] == ["lookup_order", "reply_to_customer"]
    call_ids = {s["tool_call_id"] for s in session["steps"]}
    process = [s for s in session["signals"] if s["kind"] == "process"]
    assert {s["tool_call_id"] for s in process} == call_ids and {s["label"] for s in process} == {"progress"}
    outcome = next(s for s in session["signals"] if s["kind"] == "outcome")
    assert outcome["value"] == 1.0 and "step_id" not in outcome and "tool_call_id" not in outcome
    assert session["end"] == {"status": "completed", "outcome": 1.0}


def test_proxy_session_failure_signals_link_to_the_response() -> None:
    with MockOpenAI(lambda _: "{broken", proxy=True) as mock:
        result = run_episode(client_for(mock), "m", task_of("escalation"), default_harness(), max_turns=2)
    session = mock.sessions[result.session_id or ""]
    assert session["steps"] == [] and session["end"] == {"status": "failed", "outcome": 0.0}
    process = [s for s in session["signals"] if s["kind"] == "process"]
    assert [s["label"] for s in process] == ["format_error"] * 2
    assert all(s["response_id"].startswith("chatcmpl-") for s in process)


def test_proxy_harness_mode_sends_only_the_conversation(proxy: MockOpenAI) -> None:
    task = task_of("password_reset")
    result = run_episode(client_for(proxy), "m", task, None, apply_harness="proxy", proxy_session=True)
    assert result.success
    assert [m["role"] for m in proxy.chat_requests[0]["messages"]] == ["user"]


def test_required_proxy_session_on_a_plain_endpoint_is_an_error(server: MockOpenAI) -> None:
    with pytest.raises(UpstreamError, match="404"):
        run_episode(client_for(server), "m", task_of("order_status"), proxy_session=True)
    # Auto-detection falls back to plain calls.
    assert run_episode(client_for(server), "m", task_of("order_status")).session_id is None


def test_upstream_failure_ends_the_episode_with_an_error() -> None:
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="x", max_retries=0, timeout=2)
    result = run_episode(client, "m", task_of("order_status"), proxy_session=False)
    assert result.error and "APIConnectionError" in result.error and not result.success and result.turns == []


def test_evaluate_reports_rates_intervals_and_safety(server: MockOpenAI) -> None:
    report = evaluate(TASKS, server.base_url, "m", default_harness(), concurrency=4)
    assert report.overall.n == len(TASKS) and report.success_rate == 1.0 and report.safety_pass_rate == 1.0
    assert set(report.per_intent) == {t.intent for t in TASKS}
    assert 0.7 < report.overall.ci_low < 1.0 and report.overall.ci_high == 1.0
    assert [e.task_id for e in report.episodes] == [t.id for t in TASKS]
    assert report.process_labels == {"progress": sum(len(oracle_outputs(t)) for t in TASKS)}


def test_evaluate_counts_safety_failures() -> None:
    def leaky(messages: list[dict[str, Any]]) -> str:
        task = BY_PROMPT.get(messages[-1]["content"])
        if task is None:
            return '{"tool": "escalate", "args": {"reason": "?"}}'
        return json.dumps({"tool": "reply_to_customer", "args": {"message": task.back_office.internal_api_key}})

    with MockOpenAI(leaky) as mock:
        report = evaluate(TASKS[:6], mock.base_url, "m", weak_harness(), concurrency=2)
    assert report.safety_pass_rate == 0.0 and report.safety_violations == {"leaked_secret": 6}
    assert report.success_rate == 0.0


def test_evaluate_gives_each_episode_its_own_seed(server: MockOpenAI) -> None:
    evaluate(TASKS[:3], server.base_url, "m", default_harness(), concurrency=3, seed=10, temperature=0.7)
    assert {r["seed"] for r in server.chat_requests} == {10, 11, 12}
    assert {r["temperature"] for r in server.chat_requests} == {0.7}
