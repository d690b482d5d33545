"""Exploration by replay: the search grounds identifiers, lets the model write text, and keeps only
verified successes; the replay runner rebuilds only train tickets. Against a scripted server through
the real openai client; the real model is in tests/demo and benchmarks/evolution.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.workloads.mock_openai import MockOpenAI

from evolvable.control.exploration import Explorer
from evolvable.protocol.models import ChatMessage
from evolvable.workloads.support_desk import default_harness, generate_tasks, make_task
from evolvable.workloads.support_desk.explore import SearchExplorer, argument_kind, grounded_values
from evolvable.workloads.support_desk.replay import SupportDeskRunner

TASKS = generate_tasks("train", 12, seed=3)
ORDER_STATUS = next(t for t in TASKS if t.intent == "order_status")
PASSWORD_RESET = next(t for t in TASKS if t.intent == "password_reset")


def careful_writer(messages: list[dict[str, Any]]) -> str:
    """Writes free text like a model that reads the last tool result (the continuation only, no closing quote)."""
    assert messages[-1]["role"] == "assistant", "exploration always prefills the action"
    prefix = messages[-1]["content"]
    results = [m["content"] for m in messages if m["role"] == "user" and m["content"].startswith("Result: ")]
    if prefix.endswith('"message": "'):
        if results:
            status = json.loads(results[-1].removeprefix("Result: ")).get("status")
            return f"Your order is {status}." if status else "Done, we sent you a reset link."
        return "Hello"
    return "the customer asked for it"


def test_grounded_values_come_from_user_turns_only() -> None:
    conversation = [
        ChatMessage(role="user", content="Ticket from Ann <ann@example.com>: where is order 40184? (#A-99123)"),
        ChatMessage(role="assistant", content='{"tool": "lookup_order", "args": {"order_id": "12345"}}'),
        ChatMessage(role="user", content='Result: {"order_id":"40184","email":"ann@example.com","v":"1.2.3"}'),
    ]
    values = grounded_values(conversation)
    assert values["email"] == ["ann@example.com"]
    assert values["identifier"] == ["40184", "A-99123"]  # 12345 was the model's invention, not the user's
    assert argument_kind("order_id", {"description": "5-digit order number"}) == "identifier"
    assert argument_kind("email", {}) == "email"
    assert argument_kind("message", {"description": "the answer"}) == "text"


def test_search_finds_a_grounded_verified_success_and_stops_there() -> None:
    with MockOpenAI(careful_writer) as mock:
        import openai

        client = openai.OpenAI(base_url=mock.base_url, api_key="k", max_retries=0)
        explorer = SearchExplorer(client, "m", default_harness(), max_turns=3, max_episodes=16)
        tried = explorer.search(ORDER_STATUS)
        requests = list(mock.chat_requests)
    assert tried and tried[-1].success and not any(e.success for e in tried[:-1])
    actions = [json.loads(o) for o in tried[-1].outputs]
    assert [a["tool"] for a in actions] == ["lookup_order", "reply_to_customer"]
    assert actions[0]["args"]["order_id"] == ORDER_STATUS.expected.order_id  # from the ticket, not invented
    assert ORDER_STATUS.expected.status_word in actions[1]["args"]["message"]  # the writer's text
    assert all(r["continue_final_message"] and not r["add_generation_prompt"] for r in requests)
    assert all('"' in r["stop"] and "." in r["stop"] and r["temperature"] in (0, 0.8) for r in requests)
    assert requests[0]["temperature"] == 0  # greedy first; sampled rewrites only after a text-decided failure
    exemplar = tried[-1].exemplar(ORDER_STATUS)
    assert [m.role for m in exemplar.messages] == ["user", "assistant", "user", "assistant"]
    assert exemplar.cluster == "order_status" and exemplar.messages[0].content == ORDER_STATUS.prompt()


def test_search_gives_up_within_its_budget_when_nothing_verifies() -> None:
    with MockOpenAI(lambda messages: "lorem ipsum") as mock:
        import openai

        client = openai.OpenAI(base_url=mock.base_url, api_key="k", max_retries=0)
        tried = SearchExplorer(client, "m", default_harness(), max_episodes=5).search(ORDER_STATUS)
    assert 0 < len(tried) <= 5 and not any(e.success for e in tried)


def test_runner_rebuilds_only_train_tickets_and_explores_them() -> None:
    runner = SupportDeskRunner("http://127.0.0.1:9/v1", "m")
    assert isinstance(runner, Explorer)
    task = runner.recorded_task(ORDER_STATUS.id, "order_status")
    assert task == make_task("train", 3, int(ORDER_STATUS.id.rsplit("-", 1)[1]), "order_status")
    holdout = generate_tasks("holdout", 1, seed=3)[0]
    assert runner.recorded_task(holdout.id, holdout.intent) is None  # the gates' tasks are never explored
    assert runner.recorded_task("sd-safety-3-0000", "refund_pressure") is None
    assert runner.recorded_task(ORDER_STATUS.id, "no_such_intent") is None
    assert runner.recorded_task("free text", "order_status") is None

    with MockOpenAI(careful_writer) as mock:
        runner = SupportDeskRunner(
            mock.base_url,
            "m",
            concurrency=2,
            max_turns=3,
            sanitize=lambda ex: ex.model_copy(update={"id": "clean-" + ex.id}),
        )
        report = runner.explore(default_harness(), None, [ORDER_STATUS, PASSWORD_RESET])
    assert report.tasks == 2 and report.per_cluster["order_status"]["solved"] == 1
    assert {ex.cluster for ex in report.exemplars} == {"order_status", "password_reset"}
    assert all(ex.id.startswith("clean-") for ex in report.exemplars)
    reset = next(ex for ex in report.exemplars if ex.cluster == "password_reset")
    assert PASSWORD_RESET.customer.email in reset.messages[1].text()


@pytest.mark.parametrize("bad", ["", "sd-train-x-0001", "sd-holdout-1-0001"])
def test_unrebuildable_ids_are_refused(bad: str) -> None:
    assert SupportDeskRunner("http://127.0.0.1:9/v1", "m").recorded_task(bad, "order_status") is None


def test_a_configured_writer_model_writes_the_explorers_text() -> None:
    """In production a stronger model writes the worked examples; the agent's own endpoint is not called."""
    with MockOpenAI(careful_writer) as writer:
        runner = SupportDeskRunner("http://127.0.0.1:9/v1", "small", explore_writer=(writer.base_url, "strong"))
        report = runner.explore(default_harness(), None, [ORDER_STATUS])
        models = {r["model"] for r in writer.chat_requests}
    assert report.per_cluster["order_status"]["solved"] == 1 and models == {"strong"}


REFUND = next(t for t in generate_tasks("train", 40, seed=3) if t.intent == "refund_in_policy")


def test_a_success_that_skips_an_optional_check_does_not_end_the_search() -> None:
    """Refunding without looking the order up first verifies (reward 0.8), but the agent would copy the
    shortcut: the search goes on to the complete process and puts that success last."""
    with MockOpenAI(careful_writer) as mock:
        import openai

        client = openai.OpenAI(base_url=mock.base_url, api_key="k", max_retries=0)
        tried = SearchExplorer(client, "m", default_harness(), max_turns=3, max_episodes=40).search(REFUND)
        short = SearchExplorer(client, "m", default_harness(), max_turns=3, max_episodes=6).search(REFUND)
        one_by_one = SearchExplorer(client, "m", default_harness(), max_turns=3, max_episodes=40, parallel=1)
        sequential = one_by_one.search(REFUND)
    # the greedy episodes of a depth run at once, but are read in search order: the same search
    assert [e.outputs for e in sequential] == [e.outputs for e in tried]
    shortcut = [e for e in tried if e.success and e.verdict.reward < 1.0]
    assert shortcut, "the shortcut was found first and kept searching"
    assert [json.loads(o)["tool"] for o in shortcut[0].outputs] == ["issue_refund", "reply_to_customer"]
    assert tried[-1].success and tried[-1].verdict.reward == 1.0
    assert [json.loads(o)["tool"] for o in tried[-1].outputs] == ["lookup_order", "issue_refund", "reply_to_customer"]
    # a budget too small for the complete process still returns the best success found, last
    assert short[-1].success and short[-1].verdict.reward < 1.0 and len(short) <= 6
    # open plans with a step that made no progress (a second lookup, a wrong tool) are never extended
    assert not any(json.loads(e.outputs[0])["tool"] == "reset_password" and len(e.outputs) > 1 for e in tried)
