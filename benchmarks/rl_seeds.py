"""Seeds and settings of `benchmarks/rl.py` side by side: the gate's promise and each idea's effect.

Reads rl.py JSONs (a single run, or one seed's `--arm` run holding several settings) and reports, per
setting and seed: holdout success before and after, whether the gate published, the paired difference
with its 95% CI; per setting, the pooled gain over all seeds' tickets (paired CI) and over seeds (t
interval on the per-seed differences), whether any seed ended below the served policy; and per idea, its
effect against the baseline setting on the same seed and tickets (after vs after, paired).

    python benchmarks/rl_seeds.py benchmarks/results/rl_arms_s*.json --baseline base
    python benchmarks/rl_seeds.py base=benchmarks/results/rl.json base=benchmarks/results/rl_seed1.json ...

Writes benchmarks/results/rl_seeds.json and prints a Rich table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from rl import paired_stats

RESULTS = Path(__file__).parent / "results" / "rl_seeds.json"


@dataclass(frozen=True)
class Run:
    """One setting on one seed: the holdout tickets' success before and after, by ticket id."""

    setting: str
    seed: int
    before: dict[str, bool]
    after: dict[str, bool]
    published: bool
    safety_before: float
    safety_after: float
    reward_before: dict[str, float]
    reward_after: dict[str, float]
    round: dict[str, Any]
    """The round's training facts (steps, samples, rare-intent runs, exploration positives, gate)."""


def runs_from(doc: dict[str, Any], name: str) -> list[Run]:
    """The runs in one rl.py JSON: each arm of an `--arm` run, or the single run (named `name`)."""
    reports = doc["arms"] if "arms" in doc else {doc["config"].get("arm") or name: doc}
    return [_run(setting, report) for setting, report in reports.items()]


def _run(setting: str, report: dict[str, Any]) -> Run:
    episodes = report["holdout_episodes"]
    return Run(
        setting=setting,
        seed=int(report["config"]["seed"]),
        before={e["task_id"]: bool(e["before"]["success"]) for e in episodes},
        after={e["task_id"]: bool(e["after"]["success"]) for e in episodes},
        published=any(r.get("published") for r in report["rounds"]),
        safety_before=float(report["before"]["safety_pass_rate"]),
        safety_after=float(report["after"]["safety_pass_rate"]),
        reward_before={e["task_id"]: float(e["before"]["reward"]) for e in episodes},
        reward_after={e["task_id"]: float(e["after"]["reward"]) for e in episodes},
        round=_round_facts(report["rounds"]),
    )


def _round_facts(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """What the last round trained on and how the gate decided (empty for a run with no round)."""
    if not rounds:
        return {}
    last = rounds[-1]
    gate = last.get("gate") or {}
    keys = ("optimizer_steps", "samples", "rare_intent_runs", "exploration_positives", "approx_kl")
    return {k: last.get(k) for k in keys} | {"gate": gate.get("reason")}


def rate(outcomes: dict[str, bool]) -> float:
    return sum(outcomes.values()) / len(outcomes) if outcomes else 0.0


def paired(runs: list[Run], first: str = "before", second: str = "after", other: list[Run] | None = None) -> dict:
    """Paired statistics over every ticket of `runs` (pooled over seeds): `second` minus `first`. With
    `other`, `first` is read from the run of the same seed in `other` (an idea against the baseline)."""
    by_seed = {r.seed: r for r in other} if other is not None else {}
    s1: list[bool] = []
    s2: list[bool] = []
    r1: list[float] = []
    r2: list[float] = []
    for run in runs:
        ref = by_seed[run.seed] if other is not None else run
        tickets = sorted(run.before)
        if set(ref.before) != set(tickets):
            raise ValueError(f"seed {run.seed}: the runs measured different holdout tickets")
        s1 += [getattr(ref, first)[t] for t in tickets]
        s2 += [getattr(run, second)[t] for t in tickets]
        r1 += [getattr(ref, f"reward_{first}")[t] for t in tickets]
        r2 += [getattr(run, f"reward_{second}")[t] for t in tickets]
    return {"tickets": len(s1), **paired_stats(s1, s2, r1, r2)}


def seed_level(diffs: list[float]) -> dict[str, Any]:
    """Mean of the per-seed differences with a 95% t interval over seeds (seed-to-seed variation)."""
    from scipy import stats

    n = len(diffs)
    mean = sum(diffs) / n if n else 0.0
    if n < 2:
        return {"seeds": n, "mean": mean, "ci95": None}
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"seeds": n, "mean": mean, "ci95": [mean - half, mean + half]}


def summarize(runs: list[Run], baseline: str) -> dict[str, Any]:
    """Per setting: the seeds' rows, the pooled gain, the gate check; per idea: its effect on the baseline."""
    settings: dict[str, list[Run]] = {}
    for run in runs:
        settings.setdefault(run.setting, []).append(run)
    out: dict[str, Any] = {"baseline": baseline, "settings": {}}
    for setting, group in settings.items():
        group.sort(key=lambda r: r.seed)
        seeds = [{"seed": r.seed, **_seed_row(r)} for r in group]
        entry: dict[str, Any] = {
            "seeds": seeds,
            "pooled": paired(group),
            "over_seeds": seed_level([row["success_diff"] for row in seeds]),
            "no_seed_below_served": all(row["success_diff"] >= 0 for row in seeds),
            "seeds_below_served": [row["seed"] for row in seeds if row["success_diff"] < 0],
            "published": sum(r.published for r in group),
        }
        base = {r.seed: r for r in settings.get(baseline, [])}
        shared = [r for r in group if r.seed in base]
        if setting != baseline and shared:
            entry["vs_baseline"] = paired(shared, "after", "after", other=[base[r.seed] for r in shared])
            entry["vs_baseline"]["seeds"] = [r.seed for r in shared]
            entry["vs_baseline"]["per_seed"] = {r.seed: rate(r.after) - rate(base[r.seed].after) for r in shared}
        out["settings"][setting] = entry
    return out


def _seed_row(run: Run) -> dict[str, Any]:
    stats = paired([run])
    return {
        "before": rate(run.before),
        "after": rate(run.after),
        "published": run.published,
        "success_diff": stats["success_diff"],
        "ci95": stats["success_diff_ci95_paired"],
        "gained": stats["tickets_gained"],
        "lost": stats["tickets_lost"],
        "safety": [run.safety_before, run.safety_after],
        **run.round,
    }


def _table(summary: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"rl.py over seeds (idea effect: after vs after of '{summary['baseline']}', same tickets)")
    for col in ("setting", "seed", "before", "after", "gate", "diff [paired 95% CI]", "gained / lost", "vs baseline"):
        table.add_column(col)
    for setting, entry in summary["settings"].items():
        versus = entry.get("vs_baseline", {})
        for row in entry["seeds"]:
            low, high = row["ci95"]
            delta = versus.get("per_seed", {}).get(row["seed"])
            table.add_row(
                setting,
                str(row["seed"]),
                f"{row['before']:.1%}",
                f"{row['after']:.1%}",
                f"{'published' if row['published'] else 'kept'} ({row.get('optimizer_steps')} steps)",
                f"{row['success_diff']:+.1%} [{low:+.1%}, {high:+.1%}]",
                f"{row['gained']} / {row['lost']}",
                "" if delta is None else f"{delta:+.1%}",
            )
        pooled, seeds = entry["pooled"], entry["over_seeds"]
        low, high = pooled["success_diff_ci95_paired"]
        over = "" if seeds["ci95"] is None else f"; over seeds [{seeds['ci95'][0]:+.1%}, {seeds['ci95'][1]:+.1%}]"
        vs = ""
        if versus:
            vlow, vhigh = versus["success_diff_ci95_paired"]
            vs = f"{versus['success_diff']:+.1%} [{vlow:+.1%}, {vhigh:+.1%}]"
        table.add_row(
            f"[bold]{setting}[/] pooled",
            f"{len(entry['seeds'])} seeds",
            "",
            "",
            f"{entry['published']} published",
            f"{pooled['success_diff']:+.1%} [{low:+.1%}, {high:+.1%}]{over}",
            f"{pooled['tickets_gained']} / {pooled['tickets_lost']}",
            vs,
        )
        check = "yes" if entry["no_seed_below_served"] else f"NO: seeds {entry['seeds_below_served']}"
        table.add_row("", "", "", "", "", f"no seed below the served policy: {check}", "", "")
    return table


def _named(text: str) -> tuple[str, Path]:
    """SETTING=PATH names a single run's setting; a bare PATH is `single` (an --arm run names its own)."""
    name, sep, path = text.partition("=")
    return (name, Path(path)) if sep else ("single", Path(text))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="rl.py JSONs: --arm runs, or [SETTING=]PATH of single runs")
    parser.add_argument("--baseline", default="base", help="the setting each idea is compared against")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    from rich.console import Console

    named = [_named(text) for text in args.runs]
    runs = [run for name, path in named for run in runs_from(json.loads(path.read_text()), name)]
    summary = summarize(runs, args.baseline) | {"files": [path.name for _, path in named]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    console = Console() if Console().is_terminal else Console(width=160)
    console.print(_table(summary))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
