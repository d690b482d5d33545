"""Trainer settings compared on identical data: retrain on the rollouts an rl.py run recorded.

`benchmarks/rl.py --workdir DIR` keeps the proxy's store (DIR/store.db) with the round's rollouts,
and its JSON holds every holdout ticket's result under the base policy. This script trains one
adapter per variant on those same trajectories, hot-loads it, runs the same holdout tickets and
reports the paired difference against the base policy of that run. Sampling noise in the data is
then out of the comparison: what differs is only the trainer setting.

    python benchmarks/rl.py --seed 1 --workdir runs/rl-seed1 --out runs/rl-seed1.json
    python benchmarks/rl_ablation.py --run runs/rl-seed1.json --workdir runs/rl-seed1 \\
        --variant summed:process_gamma=1.0 --variant own-turn:process_gamma=0.0 --variant kl:kl_coef=0.1

A variant is NAME:KEY=VALUE,KEY=VALUE with RLConfig keys (values parsed as JSON), plus
`greedy_anchors=true`: first record one greedy run of the base policy per train ticket (into a copy
of the store), as `rl.py --greedy-anchors` does. The other settings are rl.py's, read from the run's
JSON. ~6 minutes per variant on 2 CPU cores. Writes
benchmarks/results/rl_ablation.json and prints a Rich table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).parent))

from rl import named_overrides, paired_stats, support_desk_harness, trainer_settings

RESULTS = Path(__file__).parent / "results" / "rl_ablation.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="the rl.py JSON of the run whose rollouts are reused")
    parser.add_argument("--workdir", required=True, help="that run's --workdir (holds store.db)")
    parser.add_argument("--variant", type=named_overrides, action="append", required=True)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    run = json.loads(Path(args.run).read_text())
    store = Path(args.workdir) / "store.db"
    if not store.is_file():
        raise SystemExit(f"{store} not found: pass the --workdir the rl.py run used")

    from rich.console import Console
    from rich.table import Table

    from evolvable.app.local import local_stack
    from evolvable.model_loading import load_base_model
    from evolvable.store import TrajectoryFilter
    from evolvable.trainer.config import RLConfig
    from evolvable.trainer.loop import run_training_job
    from evolvable.trainer.publish import manifest_for, publish
    from evolvable.trainer.samples import StoreSource
    from evolvable.workloads.support_desk.evaluate import evaluate
    from evolvable.workloads.support_desk.harnesses import AGENT_NAME
    from evolvable.workloads.support_desk.tasks import generate_tasks

    console = Console() if Console().is_terminal else Console(width=132)
    cfg = run["config"]
    if cfg["harness"] != "memory" or cfg["rounds"] != 1:
        raise SystemExit("only one-round runs with the memory harness (rl.py's default) are supported")
    seed = cfg["seed"]
    harness = support_desk_harness(cfg)
    holdout = generate_tasks("holdout", cfg["holdout"], seed=seed)
    before = {e["task_id"]: e["before"] for e in run["holdout_episodes"]}
    if {t.id for t in holdout} != set(before):
        raise SystemExit("the run's holdout tickets do not match its seed")
    base = trainer_settings(cfg)

    def run_episodes(tickets: list, endpoint: str, model_name: str, *, record: bool) -> Any:
        """Greedy episodes with the run's agent settings."""
        return evaluate(
            tickets,
            endpoint,
            model_name,
            harness,
            concurrency=cfg["concurrency"],
            max_turns=cfg["max_turns"],
            max_tokens=cfg["max_tokens"],
            record=record,
            timeout_s=cfg["timeout_s"],
        )

    model, tokenizer = load_base_model()
    scratch = Path(args.workdir) / "ablation"
    rows: list[dict[str, Any]] = []
    for name, overrides in args.variant:
        job_dir = scratch / name
        shutil.rmtree(job_dir, ignore_errors=True)
        settings = dict(overrides)
        anchors = bool(settings.pop("greedy_anchors", False))
        config = RLConfig(**{**base, **settings, "output_dir": str(job_dir / "job")})
        started = time.perf_counter()
        data = store
        if anchors:
            job_dir.mkdir(parents=True)
            data = job_dir / "store.db"
            shutil.copyfile(store, data)
            with local_stack(model, tokenizer, job_dir, max_batch=cfg["concurrency"]) as stack:
                tickets = generate_tasks("train", cfg["train_tasks"], seed=100 + seed)
                run_episodes(tickets, stack.proxy_v1, "smollm2-135m", record=True)
                stack.flush()
        result = run_training_job(config, StoreSource(f"sqlite:///{data}", TrajectoryFilter(agent=AGENT_NAME)))
        train_s = time.perf_counter() - started
        if result.adapter_dir is None:
            console.print(f"[red]{name}: no usable samples[/] {result.sample_stats}")
            continue
        lora_name = re.sub(r"[^A-Za-z0-9_-]", "_", name)  # PEFT module names allow no dots
        with local_stack(model, tokenizer, job_dir, max_batch=cfg["concurrency"]) as stack:
            publish(
                result.adapter_dir,
                manifest_for(result, agent=AGENT_NAME, lora_name=lora_name),
                servers=[stack.policy_server.url],
            )
            after = run_episodes(holdout, stack.policy_v1, lora_name, record=False)
        pairs = [(before[e.task_id], e) for e in after.episodes]
        stats = paired_stats(
            [b["success"] for b, _ in pairs],
            [a.success for _, a in pairs],
            [b["reward"] for b, _ in pairs],
            [a.reward for _, a in pairs],
        )
        per_intent: dict[str, list[int]] = {}
        for b, a in pairs:
            counts = per_intent.setdefault(a.intent, [0, 0, 0])
            counts[0] += int(b["success"])
            counts[1] += int(a.success)
            counts[2] += 1
        rows.append(
            {
                "variant": name,
                "overrides": overrides,
                "optimizer_steps": result.optimizer_steps,
                "approx_kl": result.metrics.get("approx_kl_mean"),
                "train_s": train_s,
                "before": run["before"]["holdout"]["rate"],
                "after": after.overall.rate,
                **stats,
                "per_intent_before_after_n": per_intent,
            }
        )
        low, high = stats["success_diff_ci95_paired"]
        console.print(
            f"{name}: {stats['success_diff']:+.1%} [{low:+.1%}, {high:+.1%}] at {time.perf_counter() - started:.0f} s"
        )

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"run": Path(args.run).name, "seed": seed, "variants": rows}, indent=2, default=str))
    table = Table(
        title=f"Trainer settings on the same rollouts (rl.py seed {seed}, base {run['before']['holdout']['rate']:.1%})"
    )
    for col in (
        "variant",
        "steps",
        "holdout after",
        "diff [paired 95% CI]",
        "gained / lost",
        "per intent (before -> after)",
    ):
        table.add_column(col)
    for r in rows:
        low, high = r["success_diff_ci95_paired"]
        moved = ", ".join(f"{k} {b}->{a}" for k, (b, a, _) in sorted(r["per_intent_before_after_n"].items()) if a != b)
        table.add_row(
            r["variant"],
            str(r["optimizer_steps"]),
            f"{r['after']:.1%}",
            f"{r['success_diff']:+.1%} [{low:+.1%}, {high:+.1%}]",
            f"{r['tickets_gained']} / {r['tickets_lost']}",
            moved or "-",
        )
    console.print(table)
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
