"""Bad input to the weights lever, through the composition root built from a configuration file: a job that
crashes, a launcher command that fails, an unreachable policy server, a vLLM(-shaped server) that rejects
the adapter; and a snapshot gate that keeps the served policy. Each leaves the served policy unchanged,
registers no candidate, and the decision record says why. The jobs are real separate processes (a tiny
random model, so each trains in seconds)."""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.vllm_fake import fake_vllm
from tests.trainer.conftest import make_trajectory

from evolvable.app.config import load_config
from evolvable.app.stack import Stack, build_control_only
from evolvable.control.adapters import loaded_adapters
from evolvable.control.models import VersionKind, VersionState
from evolvable.control.registry import Registry
from evolvable.policy_server.launcher import free_port

AGENT = "rl-agent"
TINY = {
    "base_model": "tiny-random-llama",
    "lora_r": 4,
    "lora_alpha": 8,
    "lora_targets": ["q_proj", "v_proj"],
    "rollout_batch_size": 4,
    "micro_batch_size": 2,
    "grad_accum_steps": 1,
}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def job_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the launched trainer inherits: this checkout's sources, one thread, no downloads."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def vllm() -> Iterator[str]:
    with fake_vllm("tiny-random-llama", max_lora_rank=8) as url:
        yield url


def stack_from(
    tmp_path: Path,
    policy_url: str,
    launcher: dict[str, Any],
    overrides: dict[str, Any],
    workload: dict[str, Any] | None = None,
) -> Stack:
    agent: dict[str, Any] = {"name": AGENT, "policy": {"base_model": "tiny-random-llama", "upstream": "vllm"}}
    if workload is not None:
        agent["workload"] = workload
    config = {
        "store": {"url": f"sqlite:///{tmp_path / 'store.db'}"},
        "policy_servers": [{"name": "vllm", "kind": "vllm", "url": policy_url}],
        "governance": {"enabled": False},
        "agents": [agent],
        "control": {
            "tick_interval_s": 0,
            "levers": ["weights"],
            "decision": {"min_runs": 8, "min_cluster_runs": 2, "weights_min_runs": 8, "target_success": 1.0},
            "clustering": {"enabled": False},
            "weights": {"output_dir": str(tmp_path / "rl"), "launcher": launcher, "overrides": overrides},
        },
    }
    path = tmp_path / "evolvable.yaml"
    path.write_text(yaml.safe_dump(config))
    stack = build_control_only(load_config(path))
    registry = Registry(stack.store.engine)
    active = registry.current(AGENT, VersionKind.policy, VersionState.active)
    harness = registry.current(AGENT, VersionKind.harness, VersionState.active)
    assert active is not None and harness is not None
    rng = random.Random(3)
    for i in range(12):  # recorded by the served policy, half of them failing: the weights rule fires
        run = make_trajectory(
            rng, turns=1 + i % 2, outcome=float(i % 2 == 0), policy_version=active.id, harness_version=harness.id
        )
        stack.store.put_trajectory(run.model_copy(update={"agent": AGENT, "tenant_id": "default"}))
    return stack


def tick_until_settled(stack: Stack, timeout_s: float = 240) -> dict[str, Any]:
    """Tick (as `serve` does) until a weights decision is not waiting on its job; returns that record."""
    assert stack.planes is not None
    plane = stack.planes.plane("default")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        report = stack.planes.tick()
        made = plane.journal.decisions(AGENT, limit=1)
        assert made, str(report)
        decision = made[0]
        if not decision.gates.get("pending"):
            return decision.model_dump(mode="json")
        time.sleep(1)
    raise AssertionError("the weights decision did not settle")


def assert_served_policy_unchanged(stack: Stack) -> None:
    registry = Registry(stack.store.engine)
    policies = registry.versions(AGENT, kind=VersionKind.policy)
    assert [(p.state, p.policy().lora_name) for p in policies] == [(VersionState.active, None)]


@pytest.mark.parametrize(
    ("case", "launcher", "overrides", "reason"),
    [
        ("job crashes", {"kind": "local", "tool": "python"}, {"base_model": "/nonexistent/model"},
         r"weights: training job job-\w+ failed: .*nonexistent"),
        ("launcher fails", {"kind": "command", "template": "echo 'queue closed' >&2; exit 3"}, {},
         r"weights: cannot launch the training job: launcher command exited 3: queue closed"),
        ("vLLM rejects", {"kind": "local", "tool": "python"}, {"lora_r": 16, "lora_alpha": 32},
         r"adapter trained but not loadable: .* refused adapter .*LoRA rank 16 is greater than max_lora_rank 8"),
    ],
)  # fmt: skip
def test_bad_input_leaves_the_served_policy_and_says_why(
    tmp_path: Path, vllm: str, case: str, launcher: dict[str, Any], overrides: dict[str, Any], reason: str
) -> None:
    with stack_from(tmp_path, vllm, launcher, {**TINY, **overrides}) as stack:
        decision = tick_until_settled(stack)
        assert decision["lever"] == "weights" and decision["state"] == "unavailable", (case, decision)
        assert decision["candidate_version"] is None
        assert re.search(reason, decision["gates"]["evolver"]), (case, decision["gates"])
        assert_served_policy_unchanged(stack)


def test_an_unreachable_policy_server_leaves_the_served_policy_and_says_why(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    with stack_from(tmp_path, nobody, {"kind": "local", "tool": "python"}, TINY) as stack:
        decision = tick_until_settled(stack)
        assert decision["state"] == "unavailable" and decision["candidate_version"] is None, decision
        evolver = decision["gates"]["evolver"]
        assert evolver.startswith("weights lever: adapter trained but not loadable: cannot reach"), evolver
        assert_served_policy_unchanged(stack)


def test_a_gate_that_keeps_the_served_policy_publishes_nothing_and_unloads_the_snapshots(
    tmp_path: Path, vllm: str
) -> None:
    """The scripted workload's outcomes do not depend on the policy: no snapshot solves more validation
    tasks than the served policy, so the measured rule (`min_gain: 1`) publishes nothing."""
    launcher = {"kind": "local", "tool": "python"}
    scripted = {"object": "tests.app.scripted_workload:workload"}
    with stack_from(tmp_path, vllm, launcher, TINY, workload=scripted) as stack:
        decision = tick_until_settled(stack)
        assert decision["state"] == "unavailable" and decision["candidate_version"] is None, decision
        evolver = decision["gates"]["evolver"]
        assert evolver.startswith("weights: the snapshot gate kept the served policy: no snapshot beat"), evolver
        assert_served_policy_unchanged(stack)
        assert loaded_adapters(vllm) == set()  # the snapshots loaded for validation were unloaded
