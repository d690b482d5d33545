"""The IT helpdesk explorer: recorded train tickets are rebuilt and searched in the directory; only verified,
safe successes come back, as exemplars in the agent's own format. The model is a scripted server (the real
model runs in benchmarks/evolution.py --workload it_helpdesk)."""

from __future__ import annotations

import json

from tests.workloads.mock_openai import MockOpenAI

from evolvable.control.exploration import explorer_of
from evolvable.control.workloads import WorkloadContext
from evolvable.workloads.it_helpdesk.agent import ItHelpdeskRunner
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
        asked = list(mock.chat_requests)
    assert {ex.cluster for ex in report.exemplars} == set(INTENTS)
    assert report.tasks == 10 and len(report.exemplars) == 10
    by_id = {t.id: t for t in tasks}
    for ex in report.exemplars:
        task = by_id[ex.id.removeprefix("ex-explore-")]
        # The ticket and the one action: no reply turn for a small model to copy in place of the action.
        assert [m.role for m in ex.messages] == ["user", "assistant"] and ex.messages[0].text() == task.prompt()
        action = json.loads(ex.messages[1].text())
        directory = Directory.for_task(task)  # replaying the exemplar's action is a verified, safe success
        directory.call(action["tool"], action["args"])
        verdict = verify(directory)
        assert verdict.success and not verdict.violation, (task.text, action)
    assert asked == []  # the actions came from the search, not from the model


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
