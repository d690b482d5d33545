"""Episodes through the real proxy into the real store (SQLite and PostgreSQL); the upstream is scripted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
from tests.workloads.mock_openai import MockOpenAI
from tests.workloads.proxy_helpers import running_proxy, wait_for_store

from evolvable.protocol.models import LLMCallStep, ToolCallStep
from evolvable.store import Store, TrajectoryFilter
from evolvable.workloads.support_desk import default_harness, evaluate, generate_tasks, oracle_outputs, run_episode

TASKS = generate_tasks("holdout", 6, seed=21) + generate_tasks("safety", 2, seed=21)
BY_PROMPT = {t.prompt(): t for t in TASKS}


def oracle(messages: list[dict[str, Any]]) -> str:
    start = max(i for i, m in enumerate(messages) if m["role"] == "user" and m["content"] in BY_PROMPT)
    done = sum(1 for m in messages[start:] if m["role"] == "assistant")
    return oracle_outputs(BY_PROMPT[messages[start]["content"]])[done]


def test_episodes_become_complete_trajectories_with_tool_steps_and_signals(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    try:
        with MockOpenAI(oracle) as upstream, running_proxy(upstream.base_url, store, tmp_path / "spool") as (url, rt):
            client = openai.OpenAI(base_url=url, api_key="any", max_retries=0)
            results = [run_episode(client, "m", t, default_harness()) for t in TASKS[:3]]
            failing = run_episode(
                openai.OpenAI(base_url=url, api_key="any", max_retries=0), "m", TASKS[3], default_harness(), max_turns=1
            )
            wait_for_store(rt)
        assert all(r.session_id and not r.report_errors for r in [*results, failing]), [
            r.report_errors for r in results
        ]
        assert store.count(TrajectoryFilter(agent="support-desk")) == 4
        for result in results:
            traj = store.get_trajectory(result.session_id or "")
            assert traj.status == "completed" and traj.task_id == result.task_id
            assert traj.metadata["cluster"] == result.intent and traj.metadata["split"] == "holdout"
            llm = [s for s in traj.steps if isinstance(s, LLMCallStep)]
            tools = [s for s in traj.steps if isinstance(s, ToolCallStep)]
            assert len(llm) == len(result.turns) == len(tools)
            assert [t.tool_name for t in tools] == [t.tool for t in result.turns]
            assert llm[0].request_messages[0].role == "system"
            assert traj.outcome() == 1.0
            process = [g for g in traj.signals if g.kind == "process"]
            assert {g.step_id for g in process} == {t.id for t in tools}
            assert any(g.kind == "verifier" and g.label == "safety_pass" for g in traj.signals)
        failed = store.get_trajectory(failing.session_id or "")
        assert failed.status == "failed" and failed.outcome() == failing.reward < 1.0
    finally:
        store.close()


def test_evaluate_with_record_runs_sessions_through_the_proxy(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        with MockOpenAI(oracle) as upstream, running_proxy(upstream.base_url, store, tmp_path / "spool") as (url, rt):
            report = evaluate(TASKS, url, "m", default_harness(), concurrency=4, record=True)
            unrecorded = evaluate(TASKS[:2], url, "m", default_harness(), concurrency=2, record=False)
            wait_for_store(rt)
        assert report.success_rate == 1.0 and all(e.session_id for e in report.episodes)
        assert all(e.session_id is None for e in unrecorded.episodes)
        assert store.count(TrajectoryFilter(agent="support-desk", has_outcome=True)) == len(TASKS)
    finally:
        store.close()
