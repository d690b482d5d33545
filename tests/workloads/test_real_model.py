"""End to end with the embedded model: `evolvable policy-server` in a subprocess, the real openai client,
and the real proxy in front of it. Few episodes and few tokens: the point is the wiring, not the score."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from tests.workloads.proxy_helpers import running_proxy, wait_for_store

from evolvable.protocol.models import LLMCallStep, ToolCallStep
from evolvable.store import Store, TrajectoryFilter
from evolvable.workloads.support_desk import default_harness, evaluate, generate_tasks, oracle_exemplars, run_episode

pytestmark = pytest.mark.slow

HARNESS = default_harness(oracle_exemplars(generate_tasks("train", 12, seed=0)), memory_k=1)


@pytest.fixture(scope="module")
def policy_server() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "evolvable.cli.main", "policy-server", "--port", str(port), "--max-batch", "8"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    try:
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"policy server exited: {out[-2000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("policy server did not start within 300 s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_episodes_on_the_embedded_model(policy_server: str) -> None:
    tasks = generate_tasks("holdout", 3, seed=2)
    report = evaluate(tasks, policy_server, "smollm2-135m", HARNESS, concurrency=3, max_turns=2, max_tokens=40)
    assert report.errors == 0 and report.overall.n == 3
    for episode in report.episodes:
        assert episode.turns and all(t.output for t in episode.turns)
        llm = episode.trajectory.llm_calls()
        assert len(llm) == len(episode.turns) and all(s.usage and s.usage.completion_tokens > 0 for s in llm)
        assert 0.0 <= episode.reward <= 1.0


def test_greedy_episodes_are_reproducible(policy_server: str) -> None:
    client = openai.OpenAI(base_url=policy_server, api_key="x", max_retries=0, timeout=600)
    task = generate_tasks("holdout", 1, seed=3)[0]
    first = run_episode(client, "smollm2-135m", task, HARNESS, max_turns=1, max_tokens=32, proxy_session=False)
    second = run_episode(client, "smollm2-135m", task, HARNESS, max_turns=1, max_tokens=32, proxy_session=False)
    assert [t.output for t in first.turns] == [t.output for t in second.turns]


def test_episodes_through_the_proxy_are_stored_with_tool_steps_and_signals(policy_server: str, tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    tasks = generate_tasks("holdout", 2, seed=4)
    try:
        with running_proxy(policy_server, store, tmp_path / "spool") as (url, runtime):
            report = evaluate(
                tasks, url, "smollm2-135m", HARNESS, concurrency=2, max_turns=2, max_tokens=40, record=True
            )
            wait_for_store(runtime)
        assert report.errors == 0
        assert store.count(TrajectoryFilter(agent="support-desk")) == 2
        tool_steps = 0
        for episode in report.episodes:
            assert not episode.report_errors, episode.report_errors
            traj = store.get_trajectory(episode.session_id or "")
            assert traj.status in ("completed", "failed") and traj.outcome() == episode.reward
            llm = [s for s in traj.steps if isinstance(s, LLMCallStep)]
            tools = [s for s in traj.steps if isinstance(s, ToolCallStep)]
            tool_steps += len(tools)
            assert len(llm) == len(episode.turns)
            assert all(s.has_token_ids for s in llm), "the proxy records engine token ids from the policy server"
            process = [g for g in traj.signals if g.kind == "process"]
            assert len(process) == len(episode.turns) and all(g.step_id for g in process)
        assert tool_steps > 0
    finally:
        store.close()


def test_redacted_exemplars_teach_the_reset_of_the_live_customers_own_email(policy_server: str) -> None:
    """The memory lever's exemplars are redacted (`reset_password {"email": "<EMAIL_1>"}`); the 135M model
    copies the action it is shown, so with the live ticket's values in it, it resets the ticket's own email
    (benchmarks/exemplar_values.py: 0/6 with the placeholders as recorded, 6/6 with the live values)."""
    from evolvable.app.redaction import exemplar_redactor
    from evolvable.governance.redaction import live_values

    redact = exemplar_redactor()
    examples = generate_tasks("train", 2, seed=7, intents=["password_reset"])
    memory = [redact(ex) for ex in oracle_exemplars(examples)]
    assert all('"<EMAIL_1>"' in ex.messages[1].text() for ex in memory)
    harness = default_harness(memory=memory)
    client = openai.OpenAI(base_url=policy_server, api_key="x", max_retries=0, timeout=600)
    for task in generate_tasks("holdout", 2, seed=11, intents=["password_reset"]):
        episode = run_episode(
            client,
            "smollm2-135m",
            task,
            harness,
            max_turns=1,
            max_tokens=48,
            proxy_session=False,
            live_values=live_values,
        )
        first = episode.turns[0]
        assert first.tool == "reset_password" and first.args == {"email": task.customer.email}, first.output
        assert all(ex.customer.email not in first.output for ex in examples)
