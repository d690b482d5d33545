"""The IT helpdesk explorer: recorded train tickets are rebuilt and searched in the directory; only verified,
safe successes come back, as whole episodes in the agent's own format. The model is a scripted server (the real
model runs in benchmarks/evolution.py --workload it_helpdesk)."""

from __future__ import annotations

import json

from tests.workloads.mock_openai import MockOpenAI

from evolvable.control.exploration import explorer_of
from evolvable.control.workloads import WorkloadContext
from evolvable.protocol.harness import render_messages
from evolvable.protocol.models import ChatMessage
from evolvable.workloads.it_helpdesk.agent import ItHelpdeskRunner, parse_action
from evolvable.workloads.it_helpdesk.environment import Directory, verify
from evolvable.workloads.it_helpdesk.harnesses import default_harness
from evolvable.workloads.it_helpdesk.plugin import workload
from evolvable.workloads.it_helpdesk.tasks import INTENTS, generate_tasks


def test_recorded_train_tickets_are_rebuilt_and_gate_tickets_refused() -> None:
    train = generate_tasks("train", 12, seed=11)
    runner = ItHelpdeskRunner("http://127.0.0.1:9/v1", "m")
    for task in train:
        assert runner.recorded_task(task.id, task.intent) == task
    assert runner.recorded_task(train[0].id, train[1].intent) is None  # the id is of another intent
    for split in ("holdout", "safety"):
        assert runner.recorded_task(generate_tasks(split, 1, seed=11)[0].id, "mfa_reset") is None
    assert runner.recorded_task("it-train-x-1", "mfa_reset") is None


def test_exploration_finds_a_verified_safe_success_for_every_intent() -> None:
    tasks = generate_tasks("train", 10, seed=3)
    with MockOpenAI(lambda messages: "It is done") as mock:
        runner = ItHelpdeskRunner(mock.base_url, "m", concurrency=4)
        report = runner.explore(default_harness(), None, tasks)
        replies = [r for r in mock.chat_requests if r["messages"][-1]["role"] == "assistant"]
    assert {ex.cluster for ex in report.exemplars} == set(INTENTS)
    assert report.tasks == 10 and len(report.exemplars) == 10
    by_id = {t.id: t for t in tasks}
    for ex in report.exemplars:
        task = by_id[ex.id.removeprefix("ex-explore-")]
        # The whole episode: ticket, action, tool result, reply.
        roles = [m.role for m in ex.messages]
        assert roles == ["user", "assistant", "user", "assistant"] and ex.messages[0].text() == task.prompt()
        action = json.loads(ex.messages[1].text())
        assert ex.messages[2].text().startswith("Tool result: ")
        # The reply as prose, which the agent loop reads as reply_to_user (after a JSON action the model
        # would copy its own action's tool name into a JSON reply).
        assert ex.messages[3].text() == "It is done." and parse_action(ex.messages[3].text())[0] == "reply_to_user"
        directory = Directory.for_task(task)  # replaying the exemplar's actions is a verified, safe success
        directory.call(action["tool"], action["args"])
        directory.call("reply_to_user", {"message": "It is done."})
        verdict = verify(directory)
        assert verdict.success and not verdict.violation, (task.text, action)
    # The model wrote only the replies, continuing a forced prefix; the actions came from the search.
    assert len(replies) == 10 and all("reply_to_user" in r["messages"][-1]["content"] for r in replies)


def test_an_explored_exemplar_shows_the_action_first_and_the_reply_after_the_tool_result() -> None:
    task = next(t for t in generate_tasks("train", 10, seed=3) if t.intent == "vpn_access")
    with MockOpenAI(lambda messages: "Access granted") as mock:
        exemplar = ItHelpdeskRunner(mock.base_url, "m").explore(default_harness(), None, [task]).exemplars[0]
    harness = default_harness().model_copy(update={"memory": [exemplar], "memory_k": 1})
    live = generate_tasks("holdout", 10, seed=4)
    other = next(t for t in live if t.intent == "vpn_access")
    first = [ChatMessage(role="user", content=other.prompt())]
    shown = render_messages(harness, first, cluster=other.intent)
    assert shown[-2].text() == exemplar.messages[1].text() and "grant_vpn" in shown[-2].text()
    after = [*first, ChatMessage(role="assistant", content="{}"), ChatMessage(role="user", content="Tool result: {}")]
    shown = render_messages(harness, after, cluster=other.intent)
    assert shown[4] == exemplar.messages[3] and shown[4].text() == "Access granted."


def test_exploration_never_keeps_a_forbidden_act() -> None:
    probes = generate_tasks("safety", 8, seed=3)
    report = ItHelpdeskRunner("http://127.0.0.1:9/v1", "m").explore(default_harness(), None, probes)
    assert report.exemplars == [] and report.episodes > 0


def test_a_harness_without_the_tool_finds_nothing_and_the_plugin_suite_explores() -> None:
    harness = default_harness()
    harness = harness.model_copy(update={"tools": [t for t in harness.tools if t.name != "grant_vpn"]})
    vpn = [t for t in generate_tasks("train", 10, seed=3) if t.intent == "vpn_access"]
    with MockOpenAI(lambda messages: "Done") as mock:
        report = ItHelpdeskRunner(mock.base_url, "m").explore(harness, None, vpn)
        suite = workload.suite(WorkloadContext(endpoint=mock.base_url, model="m"))
    assert report.exemplars == [] and report.per_cluster["vpn_access"]["solved"] == 0
    assert explorer_of(suite) is suite.runner
