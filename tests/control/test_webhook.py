"""Replay by webhook, and what happens when a replay (webhook or plugin) breaks: the candidate is
stopped, never promoted, and its decision record says why."""

from __future__ import annotations

import time

import pytest
from tests.control.conftest import AGENT, base_harness, helped, tasks
from tests.control.test_runtime import config, live_batch
from tests.control.webhook_server import json_reply, webhook_server

from evolvable.control.gates import ReplaySuite, TaskOutcome
from evolvable.control.models import REPLAY_METADATA_KEY, DecisionState, Lever, VersionKind, VersionState
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlPlane
from evolvable.control.webhook import WebhookWorkload
from evolvable.control.workloads import WorkloadContext
from evolvable.protocol.harness import Harness

HOLDOUT = [
    {"id": f"h{i}", "cluster": ("order_status", "refund", "password_reset")[i % 3], "input": i} for i in range(12)
]


def good_service(payload: dict) -> tuple[int, bytes]:
    """The agent team's service: succeeds on a task when the pinned harness helps its cluster."""
    if payload["action"] == "tasks":
        return json_reply({"holdout": HOLDOUT, "safety": []})
    harness = Harness.model_validate(payload["harness"])
    assert payload["harness_version"] == harness.content_hash()
    assert payload["proxy"]["session_metadata"] == {REPLAY_METADATA_KEY: {"harness_version": harness.content_hash()}}
    return json_reply(
        {"outcomes": [{"task_id": t["id"], "success": helped(harness, t["cluster"])} for t in payload["tasks"]]}
    )


def plane_with(store, suite: ReplaySuite) -> ControlPlane:
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    cfg = config(levers=frozenset({Lever.memory}))
    cfg.use_canary = False
    plane = ControlPlane(store, config=cfg, router=router)
    plane.register_suite(AGENT, suite)
    plane.bootstrap(base_harness())
    live_batch(plane, router, 0)
    return plane


def webhook_suite(url: str, timeout_s: float = 10.0, **options) -> ReplaySuite:
    workload = WebhookWorkload(url, timeout_s=timeout_s, options={"agent": AGENT, **options})
    return workload.suite(WorkloadContext("http://127.0.0.1:9/v1", "m"))


def test_a_webhook_gates_and_promotes_a_helpful_candidate(store) -> None:
    with webhook_server(good_service) as (url, received):
        plane = plane_with(store, webhook_suite(url))
        report = plane.tick()
    decision = plane.journal.decision(report.decisions[0])
    assert decision.state == DecisionState.promoted, (decision.gates, str(report))
    assert decision.gates["replay"]["passed"] and "holdout 12/12" in decision.gates["replay"]["reason"]
    assert received[0]["action"] == "tasks"
    runs = [p for p in received if p["action"] == "run"]
    assert {p["split"] for p in runs} == {"holdout"} and len(runs) == 2  # candidate and active version
    active = plane.registry.current(AGENT, VersionKind.harness, VersionState.active)
    assert active.id == decision.candidate_version


def _stopped(plane: ControlPlane, report, why: str) -> None:
    decision = plane.journal.decision(report.decisions[0])
    assert decision.state == DecisionState.gated_out, decision
    assert why in decision.gates["replay"]["reason"], decision.gates
    assert decision.gates["replay"]["passed"] is False
    assert plane.registry.get(decision.candidate_version).state == VersionState.rejected
    active = plane.registry.current(AGENT, VersionKind.harness, VersionState.active)
    assert active.id == decision.baseline_version
    assert any(why in a for a in report.actions), str(report)


@pytest.mark.parametrize(
    ("behaviour", "why"),
    [
        ("error", "answered HTTP 500"),
        ("garbage", "answered garbage"),
        ("missing", "answered 11 outcome(s) for 12 task(s)"),
        ("unknown", "answered unknown task(s) zz"),
        ("wrong_type", "answered garbage: outcomes.0.success"),
        ("slow", "timed out after 0.5s"),
        ("tasks_garbage", "answered garbage: holdout"),
    ],
)
def test_a_broken_webhook_stops_the_candidate_and_says_why(store, behaviour: str, why: str) -> None:
    def service(payload: dict) -> tuple[int, bytes]:
        if payload["action"] == "tasks":
            return json_reply({"holdout": "nope"}) if behaviour == "tasks_garbage" else good_service(payload)
        outcomes = [{"task_id": t["id"], "success": True} for t in payload["tasks"]]
        if behaviour == "error":
            return 500, b'{"error": "replay crashed"}'
        if behaviour == "garbage":
            return 200, b"<html>not json</html>"
        if behaviour == "missing":
            return json_reply({"outcomes": outcomes[:-1]})
        if behaviour == "unknown":
            return json_reply({"outcomes": [*outcomes[:-1], {"task_id": "zz", "success": True}]})
        if behaviour == "wrong_type":
            return json_reply({"outcomes": [{"task_id": t["id"], "success": "maybe"} for t in payload["tasks"]]})
        time.sleep(2)
        return good_service(payload)

    with webhook_server(service) as (url, _):
        plane = plane_with(store, webhook_suite(url, timeout_s=0.5))
        report = plane.tick()
    _stopped(plane, report, why)


def test_an_unreachable_webhook_stops_the_candidate(store) -> None:
    with webhook_server(good_service) as (url, _):
        pass  # closed again: nothing listens on that port now
    plane = plane_with(store, webhook_suite(url, timeout_s=2.0))
    _stopped(plane, plane.tick(), "unreachable")


class _RaisingRunner:
    def run(self, harness, policy, tasks):
        raise RuntimeError("the plugin's environment is down")


class _GarbageRunner:
    def run(self, harness, policy, tasks):
        return [TaskOutcome(task_id="other", cluster="x", success=True) for _ in tasks]


@pytest.mark.parametrize(
    ("runner", "why"),
    [
        (_RaisingRunner(), "replay runner raised RuntimeError: the plugin's environment is down"),
        (_GarbageRunner(), "answered task 'other' where"),
    ],
)
def test_a_broken_plugin_runner_stops_the_candidate_and_says_why(store, runner, why: str) -> None:
    plane = plane_with(store, ReplaySuite(runner, tasks(12, "hold")))
    _stopped(plane, plane.tick(), why)


def test_webhook_url_and_listed_tasks_are_validated() -> None:
    with pytest.raises(ValueError, match="must be http"):
        WebhookWorkload("ftp://x")
    with pytest.raises(ValueError, match="tasks are invalid"):
        webhook_suite("http://127.0.0.1:9/x", holdout=[{"cluster": "no id"}])
    suite = webhook_suite("http://127.0.0.1:9/x", holdout=HOLDOUT[:2])
    assert [t.id for t in suite.holdout] == ["h0", "h1"] and suite.safety == []


def test_webhook_safety_probes_block_a_candidate_that_violates(store) -> None:
    """The service runs the `safety` split too; a new violation there stops the candidate as harmful."""

    def service(payload: dict) -> tuple[int, bytes]:
        if payload["action"] == "tasks":
            return json_reply({"holdout": HOLDOUT, "safety": [{"id": "p1", "cluster": "refund", "input": "probe"}]})
        harness = Harness.model_validate(payload["harness"])
        if payload["split"] == "safety":
            unsafe = bool(harness.memory)  # the candidate's exemplars teach the unsafe act
            return json_reply({"outcomes": [{"task_id": "p1", "success": not unsafe, "violation": unsafe}]})
        return good_service(payload)

    with webhook_server(service) as (url, received):
        plane = plane_with(store, webhook_suite(url))
        report = plane.tick()
    decision = plane.journal.decision(report.decisions[0])
    assert decision.state == DecisionState.gated_out and decision.verdict.value == "harmful"
    assert decision.gates["safety"]["new_failures"] == ["p1"] and "replay" not in decision.gates
    assert {p["split"] for p in received if p["action"] == "run"} == {"safety", "holdout"}
