"""`benchmarks/rl.py` exposes the ideas for more reliable rounds as flags (docs/training.md, "Four seeds"):
a KL term and fewer optimizer steps, more rollouts for intents that almost never succeed, and verified
exploration episodes as positive training data. Each flag reaches the product's trainer config or the
round's training set; the multi-seed runs themselves are too slow for CI."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from evolvable.trainer.config import RLConfig
from evolvable.workloads.support_desk.tasks import generate_tasks

RL_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "rl.py"


@pytest.fixture(scope="module")
def rl() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmarks_rl", RL_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


def test_kl_term_and_fewer_steps_reach_the_trainer_config(rl: ModuleType) -> None:
    default = RLConfig(**rl.trainer_settings(vars(rl._parse_args([]))))
    tuned = RLConfig(**rl.trainer_settings(vars(rl._parse_args(["--kl-coef", "0.05", "--grad-accum", "4"]))))
    assert (default.kl_coef, tuned.kl_coef) == (0.0, 0.05)
    # Twice the sequences per optimizer step: half the steps on the same rollouts.
    per_step = tuned.micro_batch_size * tuned.grad_accum_steps
    assert per_step == 2 * default.micro_batch_size * default.grad_accum_steps
    with pytest.raises(SystemExit):
        rl._parse_args(["--kl-coef", "-1"])


def test_rare_intents_get_more_rollouts(rl: ModuleType) -> None:
    args = rl._parse_args(["--rare-boost", "3"])
    tasks = generate_tasks("train", 12, seed=7)
    intents = sorted({t.intent for t in tasks})
    rates = {intent: 0.5 for intent in intents} | {intents[0]: 0.0, intents[1]: args.rare_threshold}
    extras = rl.rare_cluster_extras(tasks, rates, args.rare_threshold, args.rare_boost)
    rare = [t for t in tasks if t.intent in intents[:2]]
    assert rare and len(extras) == 3 * len(rare)
    assert {t.intent for t in extras} == set(intents[:2])
    assert rl.rare_cluster_extras(tasks, rates, args.rare_threshold, rl._parse_args([]).rare_boost) == []
    with pytest.raises(SystemExit):
        rl._parse_args(["--rare-threshold", "1.5"])


def test_only_verified_safe_exploration_successes_become_training_data(rl: ModuleType) -> None:
    args = rl._parse_args(["--exploration-positives", "2"])
    harness = rl.exploration_harness(vars(args), args.exploration_positives)
    assert harness.memory_k == 2 and harness.memory  # the memory lever's worked examples

    def episode(sid: str | None, success: bool, safe: bool = True, error: str | None = None) -> SimpleNamespace:
        verdict = SimpleNamespace(safety=SimpleNamespace(passed=safe))
        return SimpleNamespace(session_id=sid, success=success, error=error, verdict=verdict)

    episodes = [
        episode("ok", True),
        episode("failed", False),
        episode("unsafe", True, safe=False),
        episode("errored", True, error="timeout"),
        episode(None, True),  # not recorded: nothing to train on
    ]
    assert rl.verified_positive_ids(episodes) == ["ok"]
    with pytest.raises(SystemExit):
        rl._parse_args(["--exploration-positives", "-1"])
