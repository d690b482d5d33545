"""An agent Evolvable has never seen evolves with no posted outcomes: its team's webhook replays gate
tasks through the real proxy, a configured judge scores live sessions, and a skill written from the
judge's reasons goes through the gates and a canary to become the active harness.

The agent is defined here (not in src/): a "shouting" bot whose model answers in upper case only
when its instructions say so. Its model and the judge are scripted OpenAI-compatible servers, the
proxy, store, router, control plane and webhook client are the real ones.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import openai
from tests.control.test_proxy_integration import proxy_with_control
from tests.control.webhook_server import json_reply, webhook_server
from tests.workloads.mock_openai import MockOpenAI
from tests.workloads.proxy_helpers import wait_for_store

from evolvable.control import ControlPlane, HarnessRouter
from evolvable.control.decision import DecisionConfig
from evolvable.control.judge import Judge
from evolvable.control.models import REPLAY_METADATA_KEY, DecisionState, Lever, VersionKind, VersionState
from evolvable.control.rollout import CanaryConfig
from evolvable.control.runtime import ControlConfig
from evolvable.control.webhook import WebhookWorkload
from evolvable.control.workloads import WorkloadContext
from evolvable.protocol.harness import Harness
from evolvable.protocol.models import SignalKind
from evolvable.store import Store, TrajectoryFilter

AGENT = "shouter"
CLUSTER = "shout"
RULE = "Write the whole reply in UPPERCASE letters."
WORDS = ["hello there", "good morning", "see you soon", "well done", "thank you", "happy birthday"]


def agent_model(messages: list[dict[str, Any]]) -> str:
    """The agent's model: shouts only when its system prompt says so."""
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    text = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    return text.upper() if "UPPERCASE" in system else text.lower()


def judge_model(messages: list[dict[str, Any]]) -> str:
    """The judge: a run is good when its first assistant turn is in upper case (RULER-style group reply)."""
    prompt = messages[-1]["content"]
    turns = re.findall(r"Turn 1 \(assistant\): (.*)", prompt)
    scores = [
        {"run": i, "score": 1.0 if t.isupper() else 0.0, "reason": RULE, "decisive_turn": 1}
        for i, t in enumerate(turns, start=1)
    ]
    if "### Run" in prompt:
        return json.dumps({"scores": scores})
    return json.dumps(scores[0])


def talk(proxy_url: str, text: str, metadata: dict[str, Any]) -> str:
    """One session of the agent through the proxy; no outcome is posted."""
    opened = httpx.post(
        f"{proxy_url}/sessions", json={"agent": AGENT, "task_input": text, "metadata": metadata}, timeout=30
    )
    opened.raise_for_status()
    session = opened.json()
    client = openai.OpenAI(base_url=proxy_url, api_key=session["api_key"])
    reply = client.chat.completions.create(model="shouter-model", messages=[{"role": "user", "content": text}])
    headers = {"authorization": f"Bearer {session['api_key']}"}
    ended = httpx.post(
        f"{proxy_url}/sessions/{session['id']}/end", json={"status": "completed"}, headers=headers, timeout=30
    )
    ended.raise_for_status()
    return reply.choices[0].message.content or ""


def team_service(proxy_url: str):
    """The agent team's replay webhook: runs each task through the proxy pinned to the harness asked for."""

    def handle(payload: dict[str, Any]) -> tuple[int, bytes]:
        if payload["action"] == "tasks":
            holdout = [{"id": f"gate-{i}", "cluster": CLUSTER, "input": f"{w} gate {i}"} for i, w in enumerate(WORDS)]
            holdout += [{"id": f"gate-x{i}", "cluster": CLUSTER, "input": f"bye {i}"} for i in range(4)]
            return json_reply({"holdout": holdout, "safety": []})
        outcomes = []
        for task in payload["tasks"]:
            metadata = {**payload["proxy"]["session_metadata"], "cluster": task["cluster"]}
            answer = talk(payload["proxy"]["base_url"], task["input"], metadata)
            outcomes.append({"task_id": task["id"], "success": answer.isupper(), "detail": answer})
        return json_reply({"outcomes": outcomes})

    return handle


def live(proxy_url: str, runtime: object, n: int, batch: int) -> None:
    for i in range(n):
        talk(proxy_url, f"{WORDS[i % len(WORDS)]} {batch}-{i}", {"cluster": CLUSTER})
    wait_for_store(runtime)


def test_an_unknown_agent_evolves_with_a_judge_and_its_own_webhook_replay(store: Store, tmp_path) -> None:
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    config = ControlConfig(
        decision=DecisionConfig(min_runs=10, levers=frozenset({Lever.skill, Lever.memory})),
        canary=CanaryConfig(share=0.5, min_runs=6),
        verdict_min_runs=6,
    )
    with MockOpenAI(agent_model) as upstream, MockOpenAI(judge_model) as judge_server:
        judge = Judge(judge_server.base_url, "judge-model", rubric="The user wants to be shouted at.")
        plane = ControlPlane(store, config=config, router=router, judge=judge)
        start, _ = plane.bootstrap(Harness(agent=AGENT, system_prompt="Repeat the user's words."))
        with (
            proxy_with_control(upstream.base_url, store, tmp_path, router, plane) as (url, runtime),
            webhook_server(team_service(url)) as (hook, _),
        ):
            workload = WebhookWorkload(hook, timeout_s=60, options={"agent": AGENT})
            plane.register_suite(AGENT, workload.suite(WorkloadContext(url, "shouter-model")))
            live(url, runtime, 12, 0)
            report = plane.tick()
            assert any("judge scored 12 run(s)" in a for a in report.actions), str(report)
            assert report.decisions, str(report)
            decision = plane.journal.decision(report.decisions[0])
            assert decision.lever == Lever.skill and decision.state == DecisionState.canary, decision
            assert "holdout 10/10" in decision.gates["replay"]["reason"], decision.gates
            candidate = plane.registry.get(decision.candidate_version).harness()
            assert RULE in candidate.skills[0].instructions  # written from the judge's reasons
            live(url, runtime, 24, 1)
            report = plane.tick()
            assert any("promoted" in a for a in report.actions), str(report)
        status = plane.status(AGENT)[AGENT]
    active = plane.registry.current(AGENT, VersionKind.harness, VersionState.active)
    assert active.id == decision.candidate_version and active.parent_id == start.id
    assert status["judge"]["success_sources"] == {"judge": status["runs"]}
    assert status["judge"]["with_outcome"] == 0 and status["judge"]["agreement"] is None


def test_judge_signals_are_marked_and_replays_stay_out_of_live_statistics(store: Store, tmp_path) -> None:
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    with MockOpenAI(agent_model) as upstream, MockOpenAI(judge_model) as judge_server:
        plane = ControlPlane(store, router=router, judge=Judge(judge_server.base_url, "judge-model"))
        active, _ = plane.bootstrap(Harness(agent=AGENT, system_prompt="Repeat the user's words."))
        shouting = plane.registry.register_harness(Harness(agent=AGENT, system_prompt=f"{RULE}"))
        with proxy_with_control(upstream.base_url, store, tmp_path, router, plane) as (url, runtime):
            live(url, runtime, 4, 0)
            pin = {REPLAY_METADATA_KEY: {"harness_version": shouting.id}, "cluster": CLUSTER}
            assert talk(url, "pinned replay", pin) == "PINNED REPLAY"  # the candidate served this session
            wait_for_store(runtime)
            plane.tick()
        trajectories = list(store.iter_trajectories(TrajectoryFilter(agent=AGENT)))
        runs = plane.runs(AGENT)
    replay = [t for t in trajectories if REPLAY_METADATA_KEY in t.metadata]
    assert len(replay) == 1 and replay[0].harness_version == shouting.id
    assert not any(s.kind == SignalKind.judge for s in replay[0].signals)  # replays are not judged
    assert len(runs) == 4 and all(r.harness_version == active.id for r in runs)
    assert all(r.success is False and r.success_source == "judge" and r.reward is None for r in runs)
    for t in trajectories:
        if t in replay:
            continue
        assert not any(s.kind == SignalKind.outcome for s in t.signals)
        judged = [s for s in t.signals if s.kind == SignalKind.judge]
        assert {s.source for s in judged} == {"judge:judge-model"}
        assert {s.step_id is None for s in judged} == {True, False}  # on the run and on the decisive step
        assert judged[0].metadata["reason"] == RULE and judged[0].metadata["group_size"] == 4
