"""How much headroom the harness levers have on the support desk with the embedded model.

Evaluates the same holdout tasks (and the safety probes) under: the weak harness, the
default harness, and the default harness with oracle memory exemplars (k=2 and k=6
retrieved per request, from a pool built on the train split). Greedy decoding, so the
figures are reproducible on one machine. Starts `evolvable policy-server` unless
--endpoint is given.

    .venv/bin/python benchmarks/support_desk_headroom.py --holdout 30 --safety 8
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evolvable.policy_server.launcher import policy_server
from evolvable.workloads.support_desk import (
    comparison_table,
    default_harness,
    evaluate,
    generate_tasks,
    oracle_exemplars,
    plot_comparison,
    weak_harness,
)

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="OpenAI-compatible base URL; default: start the embedded policy server")
    parser.add_argument("--holdout", type=int, default=30)
    parser.add_argument("--safety", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--configs", default="weak,default,memory-2,memory-6")
    args = parser.parse_args()

    server = None if args.endpoint else policy_server(max_batch=16)
    endpoint = args.endpoint or server.__enter__()
    tasks = generate_tasks("holdout", args.holdout, args.seed) + generate_tasks("safety", args.safety, args.seed)
    pool = oracle_exemplars(generate_tasks("train", 24, seed=0))
    harnesses = {
        "weak": weak_harness(),
        "default": default_harness(),
        "memory-2": default_harness(pool, memory_k=2),
        "memory-6": default_harness(pool, memory_k=6),
    }
    chosen = [c for c in args.configs.split(",") if c]
    console = Console()
    reports = {}
    out: dict[str, object] = {
        "settings": vars(args) | {"endpoint": endpoint, "model": "smollm2-135m", "exemplar_pool": len(pool)},
        "configs": {},
    }
    RESULTS.mkdir(exist_ok=True)
    try:
        for name in chosen:
            with Progress(
                TextColumn(name), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
            ) as progress:
                bar = progress.add_task(name, total=len(tasks))
                report = evaluate(
                    tasks,
                    endpoint,
                    "smollm2-135m",
                    harnesses[name],
                    concurrency=args.concurrency,
                    max_turns=args.max_turns,
                    max_tokens=args.max_tokens,
                    timeout_s=3600,
                    on_episode=lambda _: progress.advance(bar),  # noqa: B023
                )
            # Holdout success and safety probes are reported separately.
            holdout = [e for e in report.episodes if e.split == "holdout"]
            safety = [e for e in report.episodes if e.split == "safety"]
            held = type(report).from_episodes(
                holdout, model=report.model, endpoint=endpoint, harness_version=report.harness_version, wall_s=0
            )
            probes = type(report).from_episodes(
                safety, model=report.model, endpoint=endpoint, harness_version=report.harness_version, wall_s=0
            )
            reports[name] = held
            out["configs"][name] = {  # type: ignore[index]
                "holdout": held.model_dump(mode="json"),
                "safety_probes": {
                    "n": len(safety),
                    "pass_rate": probes.safety_pass_rate,
                    "success_rate": probes.success_rate,
                    "violations": probes.safety_violations,
                },
                "wall_s": report.wall_s,
            }
            (RESULTS / "support_desk_headroom.json").write_text(json.dumps(out, indent=2) + "\n")
            console.print(
                f"{name}: holdout {held.success_rate:.0%} ({held.overall.ci_low:.0%}–{held.overall.ci_high:.0%}), "
                f"reward {held.mean_reward:.2f}, safety probes pass {probes.safety_pass_rate:.0%}, "
                f"{report.wall_s:.0f}s",
                highlight=False,
            )
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    if reports:
        console.print(comparison_table(reports, title="support desk holdout: success (95% CI)"))
        plot_comparison(reports, RESULTS / "support_desk_headroom.png", title="Support desk: harness headroom")


if __name__ == "__main__":
    main()
