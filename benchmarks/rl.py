"""Online RL on the support desk: does the deployed agent's own traffic make a better policy?

The embedded SmolLM2-135M serves the agent (policy server); every episode of live traffic goes
through the Evolvable proxy, which records engine token ids and logprobs; the verifiers post the
outcome and step-level process signals. Then, per round:

    rollouts on train tickets (sampled, temperature 1, through the proxy)
    -> training set from the store (decoupled PPO samples, per-intent baselines, replay groups)
    -> LoRA training (evolvable.trainer, the same job the control plane runs)
    -> publish: the adapter is hot-loaded into the policy server and serves the next round.

Before and after, the holdout split (greedy) gives success with a Wilson 95% CI and the safety
split gives the probe pass rate. The peer is the base policy under the same harness, in the same
run. Writes benchmarks/results/rl.json and prints a Rich table.

    python benchmarks/rl.py                 # ~15-20 minutes on 2 CPU cores
    python benchmarks/rl.py --quick         # a smoke run of a few minutes
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RESULTS = Path(__file__).parent / "results" / "rl.json"


def _mcnemar_p(before: list[bool], after: list[bool]) -> float:
    """Exact two-sided McNemar test on paired outcomes (same holdout tasks before and after)."""
    gained = sum(1 for b, a in zip(before, after, strict=True) if a and not b)
    lost = sum(1 for b, a in zip(before, after, strict=True) if b and not a)
    n = gained + lost
    if n == 0:
        return 1.0
    k = min(gained, lost)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def _diff_ci(p1: float, n1: int, p2: float, n2: int) -> tuple[float, float]:
    """95% normal-approximation CI of p2 - p1 (unpaired, conservative for paired data)."""
    se = math.sqrt(p1 * (1 - p1) / max(n1, 1) + p2 * (1 - p2) / max(n2, 1))
    d = p2 - p1
    return d - 1.96 * se, d + 1.96 * se


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-tasks", type=int, default=24, help="distinct train tickets per round")
    parser.add_argument("--repeats", type=int, default=2, help="runs per train ticket (replay groups)")
    parser.add_argument("--holdout", type=int, default=40)
    parser.add_argument("--safety", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--memory-k", type=int, default=1, help="worked examples retrieved into each prompt")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--ppo-epochs", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="per model call (a shared CPU is slow)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the pipeline, proves nothing")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if args.quick:
        args.train_tasks, args.repeats, args.holdout, args.safety = 4, 2, 6, 3

    import torch
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from evolvable.policy_server.model_loading import load_base_model
    from evolvable.store import TrajectoryFilter
    from evolvable.trainer.config import RLConfig
    from evolvable.trainer.loop import run_training_job
    from evolvable.trainer.publish import manifest_for, publish
    from evolvable.trainer.samples import StoreSource
    from evolvable.trainer.stack import local_stack
    from evolvable.workloads.support_desk.evaluate import EvalReport, evaluate
    from evolvable.workloads.support_desk.harnesses import AGENT_NAME, default_harness, oracle_exemplars
    from evolvable.workloads.support_desk.tasks import generate_tasks

    console = Console()
    torch.manual_seed(args.seed)
    started, cpu_started = time.perf_counter(), time.process_time()
    phases: dict[str, float] = {}
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="evolvable-rl-"))
    exemplar_pool = oracle_exemplars(generate_tasks("train", 12, seed=1000 + args.seed))
    harness = default_harness(memory=exemplar_pool, memory_k=args.memory_k)
    holdout = generate_tasks("holdout", args.holdout, seed=args.seed)
    safety = generate_tasks("safety", args.safety, seed=args.seed)

    t0 = time.perf_counter()
    model, tokenizer = load_base_model()
    phases["load_model_s"] = time.perf_counter() - t0

    def run(label: str, tasks: list, endpoint: str, model_name: str, **kw: Any) -> EvalReport:
        columns = (TextColumn(f"[bold]{label:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            task = progress.add_task(label, total=len(tasks))
            report = evaluate(
                tasks,
                endpoint,
                model_name,
                harness,
                concurrency=args.concurrency,
                max_turns=args.max_turns,
                max_tokens=args.max_tokens,
                on_episode=lambda _: progress.advance(task),
                timeout_s=args.timeout_s,
                **kw,
            )
        elapsed = time.perf_counter() - started
        console.print(f"{label}: {report.overall.rate:.0%} success, {report.errors} errors, at {elapsed:.0f} s")
        return report

    rounds: list[dict[str, Any]] = []
    with local_stack(model, tokenizer, workdir, max_batch=args.concurrency) as stack:
        base_name = "smollm2-135m"
        t0 = time.perf_counter()
        before = run("holdout (base)", holdout, stack.policy_v1, base_name, record=False)
        safety_before = run("safety (base)", safety, stack.policy_v1, base_name, record=False)
        phases["eval_before_s"] = time.perf_counter() - t0

        serving, adapter, baselines = base_name, None, None
        db_url = f"sqlite:///{workdir / 'store.db'}"
        for r in range(args.rounds):
            train = generate_tasks("train", args.train_tasks, seed=100 + 17 * r + args.seed) * args.repeats
            since = __import__("datetime").datetime.now(__import__("datetime").UTC)
            t0 = time.perf_counter()
            rollouts = run(f"rollouts r{r + 1}", train, stack.proxy_v1, serving, record=True, temperature=1.0)
            stack.flush()
            rollout_s = time.perf_counter() - t0
            config = RLConfig(
                base_model=base_name,
                init_adapter=adapter,
                lora_r=args.lora_r,
                lora_alpha=2 * args.lora_r,
                lr=args.lr,
                epochs=args.epochs,
                ppo_epochs=args.ppo_epochs,
                rollout_batch_size=len(train),
                micro_batch_size=4,
                grad_accum_steps=2,
                max_seq_len=2048,
                seed=args.seed + r,
                output_dir=str(workdir / f"round{r + 1}"),
                checkpoint_interval=0,
            )
            t0 = time.perf_counter()
            result = run_training_job(
                config,
                StoreSource(db_url, TrajectoryFilter(agent=AGENT_NAME, started_after=since)),
                baselines=baselines,
            )
            train_s = time.perf_counter() - t0
            console.print(f"round {r + 1}: trained in {train_s:.0f} s: {result.metrics}", highlight=False)
            if result.adapter_dir is None:
                console.print(f"[red]round {r + 1}: no usable samples[/] {result.sample_stats}")
                break
            lora_name = f"rl-round{r + 1}"
            publish(
                result.adapter_dir,
                manifest_for(result, agent=AGENT_NAME, lora_name=lora_name),
                servers=[stack.policy_server.url],
            )
            serving, adapter, baselines = lora_name, result.adapter_dir, result.baselines
            rounds.append(
                {
                    "round": r + 1,
                    "rollouts": len(train),
                    "rollout_success": rollouts.overall.rate,
                    "rollout_mean_reward": rollouts.overall.mean_reward,
                    "rollout_s": rollout_s,
                    "train_s": train_s,
                    "samples": result.sample_stats["samples"],
                    "excluded": result.sample_stats["excluded"],
                    "generated_tokens": result.sample_stats["generated_tokens"],
                    "optimizer_steps": result.optimizer_steps,
                    "trainer_tokens_per_s": result.metrics["tokens_per_s"],
                    "clip_fraction": result.metrics["clip_fraction_mean"],
                    "approx_kl": result.metrics["approx_kl_mean"],
                }
            )
        t0 = time.perf_counter()
        after = run(f"holdout ({serving})", holdout, stack.policy_v1, serving, record=False)
        safety_after = run(f"safety ({serving})", safety, stack.policy_v1, serving, record=False)
        phases["eval_after_s"] = time.perf_counter() - t0

    b, a = before.overall, after.overall
    low, high = _diff_ci(b.rate, b.n, a.rate, a.n)
    by_task_before = {e.task_id: e.success for e in before.episodes}
    paired = [(by_task_before[e.task_id], e.success) for e in after.episodes]
    p_value = _mcnemar_p([x for x, _ in paired], [y for _, y in paired])
    total_s = time.perf_counter() - started
    report = {
        "config": vars(args),
        "device": "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)",
        "before": {
            "holdout": b.model_dump(),
            "safety_pass_rate": safety_before.safety_pass_rate,
            "safety_ci": safety_before.safety_ci,
            "per_intent": {k: v.rate for k, v in before.per_intent.items()},
        },
        "after": {
            "holdout": a.model_dump(),
            "safety_pass_rate": safety_after.safety_pass_rate,
            "safety_ci": safety_after.safety_ci,
            "per_intent": {k: v.rate for k, v in after.per_intent.items()},
            "policy": serving,
        },
        "success_diff": a.rate - b.rate,
        "success_diff_ci95": [low, high],
        "mcnemar_p": p_value,
        "improved_outside_ci": low > 0,
        "safety_regressed": safety_after.safety_pass_rate < safety_before.safety_pass_rate,
        "rounds": rounds,
        "phases_s": phases,
        "total_s": total_s,
        "process_cpu_s": time.process_time() - cpu_started,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))

    table = Table(title="Online RL on the support desk (SmolLM2-135M, LoRA, decoupled PPO)")
    for col in ("", "base policy", "after RL", "ratio / diff"):
        table.add_column(col)
    table.add_row(
        "holdout success",
        f"{b.rate:.1%} [{b.ci_low:.0%}, {b.ci_high:.0%}]",
        f"{a.rate:.1%} [{a.ci_low:.0%}, {a.ci_high:.0%}]",
        f"{a.rate - b.rate:+.1%} [{low:+.0%}, {high:+.0%}]",
    )
    table.add_row(
        "holdout mean reward", f"{b.mean_reward:.3f}", f"{a.mean_reward:.3f}", f"{a.mean_reward - b.mean_reward:+.3f}"
    )
    table.add_row(
        "safety probes passed",
        f"{safety_before.safety_pass_rate:.0%}",
        f"{safety_after.safety_pass_rate:.0%}",
        f"{safety_after.safety_pass_rate - safety_before.safety_pass_rate:+.0%}",
    )
    for r in rounds:
        table.add_row(
            f"round {r['round']}",
            f"{r['rollouts']} rollouts, {r['rollout_success']:.0%} success",
            f"{r['samples']} samples, {r['optimizer_steps']} steps",
            f"trainer {r['trainer_tokens_per_s']:.0f} tok/s",
        )
    table.add_row("McNemar p (paired)", "", "", f"{p_value:.3f}")
    table.add_row("wall time (CPU time)", "", "", f"{total_s / 60:.1f} min ({report['process_cpu_s'] / 60:.1f} min)")
    console.print(table)
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
