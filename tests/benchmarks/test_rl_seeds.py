"""`benchmarks/rl_seeds.py`: the arithmetic behind the multi-seed report in docs/PERFORMANCE.md
(pooled paired gain, the interval over seeds, the gate check, an idea against the baseline)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def seeds() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("benchmarks_rl_seeds", BENCH / "rl_seeds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


def report(seed: int, before: list[bool], after: list[bool], published: bool = True) -> dict[str, Any]:
    """The parts of an rl.py report the aggregation reads."""
    episodes = [
        {
            "task_id": f"t{i}",
            "before": {"success": b, "reward": float(b)},
            "after": {"success": a, "reward": float(a)},
        }
        for i, (b, a) in enumerate(zip(before, after, strict=True))
    ]
    return {
        "config": {"seed": seed},
        "holdout_episodes": episodes,
        "rounds": [{"published": published}],
        "before": {"safety_pass_rate": 1.0},
        "after": {"safety_pass_rate": 1.0},
    }


def test_pooled_gain_is_the_paired_mean_over_every_seeds_tickets(seeds: ModuleType) -> None:
    base = [False, False, True, True]
    doc = {
        "arms": {
            "base": report(0, base, [True, True, True, True]),  # +2 of 4
        }
    }
    runs = seeds.runs_from(doc, "x") + seeds.runs_from({"arms": {"base": report(1, base, base, False)}}, "y")
    summary = seeds.summarize(runs, "base")["settings"]["base"]
    pooled = summary["pooled"]
    assert pooled["tickets"] == 8
    assert pooled["success_diff"] == pytest.approx(2 / 8)
    assert (pooled["tickets_gained"], pooled["tickets_lost"]) == (2, 0)
    # Paired t interval of the 8 differences [1, 1, 0, 0, 0, 0, 0, 0]: sd = sqrt(3/14), t(0.975, 7) = 2.3646.
    half = 2.364624 * math.sqrt(3 / 14) / math.sqrt(8)
    assert pooled["success_diff_ci95_paired"] == pytest.approx([0.25 - half, 0.25 + half], abs=1e-5)
    # Over seeds: the per-seed differences +0.5 and 0.0, t(0.975, 1) = 12.706.
    over = summary["over_seeds"]
    assert over["mean"] == pytest.approx(0.25)
    assert over["ci95"] == pytest.approx([0.25 - 12.7062 * 0.25, 0.25 + 12.7062 * 0.25], abs=1e-3)
    assert summary["published"] == 1 and summary["no_seed_below_served"]
    assert [row["published"] for row in summary["seeds"]] == [True, False]


def test_a_seed_that_ends_below_the_served_policy_fails_the_check(seeds: ModuleType) -> None:
    runs = seeds.runs_from({"arms": {"base": report(3, [True, True], [True, False])}}, "x")
    entry = seeds.summarize(runs, "base")["settings"]["base"]
    assert not entry["no_seed_below_served"]
    assert entry["seeds_below_served"] == [3]
    assert entry["seeds"][0]["success_diff"] == pytest.approx(-0.5)


def test_an_idea_is_compared_with_the_baseline_after_vs_after_on_the_same_seed(seeds: ModuleType) -> None:
    before = [False, False, False, True]
    arms = {
        "base": report(0, before, [True, False, False, True]),
        "kl": report(0, before, [True, True, True, True]),
    }
    # A single-run JSON (no "arms") is one setting too, named by its config's arm or the file.
    single = report(1, before, [False, False, False, True], published=False)
    runs = seeds.runs_from({"arms": arms}, "x") + seeds.runs_from(single, "base")
    out = seeds.summarize(runs, "base")["settings"]
    versus = out["kl"]["vs_baseline"]
    assert versus["seeds"] == [0]  # seed 1 has no kl run: not compared
    assert versus["success_diff"] == pytest.approx(2 / 4)
    assert (versus["tickets_gained"], versus["tickets_lost"]) == (2, 0)
    assert versus["per_seed"] == {0: pytest.approx(0.5)}
    assert "vs_baseline" not in out["base"]
    assert [row["seed"] for row in out["base"]["seeds"]] == [0, 1]


def test_runs_on_different_tickets_are_refused(seeds: ModuleType) -> None:
    a = seeds.runs_from({"arms": {"base": report(0, [True], [True])}}, "x")
    b = report(0, [True, False], [True, True])
    b["holdout_episodes"][0]["task_id"] = "other"
    runs = a + seeds.runs_from({"arms": {"kl": b}}, "y")
    with pytest.raises(ValueError, match="different holdout tickets"):
        seeds.summarize(runs, "base")


def test_single_runs_are_named_on_the_command_line(seeds: ModuleType) -> None:
    assert seeds._named("base=results/rl.json") == ("base", Path("results/rl.json"))
    assert seeds._named("results/rl.json") == ("single", Path("results/rl.json"))
    single = report(2, [True], [True])
    assert [r.setting for r in seeds.runs_from(single, "base")] == ["base"]
    single["config"]["arm"] = "kl"  # an arm's report keeps its own name
    assert [r.setting for r in seeds.runs_from(single, "base")] == ["kl"]
