"""Online RL on the support desk: does the deployed agent's own traffic make a better policy?

The embedded SmolLM2-135M serves the agent (policy server); every episode of live traffic goes
through the Evolvable proxy, which records engine token ids and logprobs; the verifiers post the
outcome and step-level process signals. Then, per round:

    rollouts on train tickets (sampled, several runs per ticket, through the proxy)
    -> training set from the store (decoupled PPO samples, replay-group baselines, process signals)
    -> LoRA training (evolvable.trainer, the same job the control plane runs), adapter snapshots
    -> gate: the served policy and three snapshots run 24 validation tickets (train split, never
       trained on); the best snapshot that beats the served policy without losing more than one
       ticket of any intent is published, else nothing is
    -> publish: the adapter is hot-loaded into the policy server and serves the next round.

Before and after, the holdout split (greedy, disjoint from every train ticket) gives success and
mean verifier reward, and the safety split the probe pass rate. The peer is the base policy under
the same harness, on the same tickets, in the same run, so the before/after comparison is paired:
the report gives paired 95% CIs of the differences (success and reward), the exact McNemar p, and
the unpaired CI as well. Writes benchmarks/results/rl.json and prints a Rich table.

    python benchmarks/rl.py                 # about 15 minutes on 2 CPU cores (one round)
    python benchmarks/rl.py --quick         # a smoke run of a few minutes

With --workdir the run keeps its store; benchmarks/rl_ablation.py then retrains on the same
rollouts with other trainer settings, which separates the setting's effect from sampling noise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import tempfile
import time
from datetime import UTC, datetime
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
    """95% normal-approximation CI of p2 - p1 as if the samples were independent (wider than paired)."""
    se = math.sqrt(p1 * (1 - p1) / max(n1, 1) + p2 * (1 - p2) / max(n2, 1))
    d = p2 - p1
    return d - 1.96 * se, d + 1.96 * se


def _paired_ci(before: list[float], after: list[float]) -> tuple[float, float, float]:
    """Mean of the per-task differences after - before, with its 95% CI (t quantile, n - 1 df).

    The same tickets are measured twice, so the task-to-task variance cancels; this is the
    interval the paired design supports (for 0/1 outcomes it is the Wald interval of a paired
    difference of proportions)."""
    from scipy import stats

    diffs = [a - b for b, a in zip(before, after, strict=True)]
    n = len(diffs)
    if n < 2:
        return (diffs[0] if diffs else 0.0), -1.0, 1.0
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def trainer_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """RLConfig arguments from rl.py's settings: its arguments, or the `config` of a run's JSON
    (older runs lack newer keys, which then take rl.py's defaults)."""
    get = settings.get
    return {
        "base_model": "smollm2-135m",
        "lora_r": settings["lora_r"],
        "lora_alpha": 2 * settings["lora_r"],
        "lora_top_layers": settings["lora_top_layers"],
        "lr": settings["lr"],
        "epochs": settings["epochs"],
        "ppo_epochs": settings["ppo_epochs"],
        "clip_eps_high": settings["clip_eps_high"],
        "process_coef": settings["process_coef"],
        "kl_coef": get("kl_coef", 0.0),
        "gamma": get("gamma", 1.0),
        "process_gamma": get("process_gamma", 0.0),
        "forking_token_fraction": get("forking_token_fraction", 1.0),
        "negative_advantage_scale": get("negative_scale", 1.0),
        # One PPO iteration per round: the data was sampled by the policy training starts from.
        "proximal_from_behaviour": True,
        "rollout_batch_size": 100_000,
        "micro_batch_size": 4,
        "grad_accum_steps": get("grad_accum", 4),
        "max_seq_len": 2048,
        "seed": settings["seed"],
        "checkpoint_interval": 0,
    }


def rare_cluster_extras(tasks: list[Any], intent_rates: dict[str, float], threshold: float, extra: int) -> list[Any]:
    """More rollouts for intents that almost never succeed: `extra` more runs of each of their tickets.
    With no success in a ticket's replay group its advantages are all zero (nothing to learn); more
    samples raise the chance that one run succeeds."""
    if extra <= 0:
        return []
    rare = {intent for intent, rate in intent_rates.items() if rate <= threshold}
    return [task for task in tasks if task.intent in rare for _ in range(extra)]


def verified_positive_ids(episodes: list[Any]) -> list[str]:
    """Stored trajectory ids of the episodes the verifier passed, safely and without an error: the only
    exploration episodes that become training data (a failure under another harness teaches nothing)."""
    return [
        e.session_id for e in episodes if e.session_id and e.success and e.error is None and e.verdict.safety.passed
    ]


def exploration_harness(settings: dict[str, Any], worked_examples: int) -> Any:
    """The memory lever's harness: verified worked examples from train tickets (oracle exemplars)."""
    return support_desk_harness({**settings, "harness": "memory", "memory_k": worked_examples})


def support_desk_harness(settings: dict[str, Any]) -> Any:
    """The harness rl.py's settings name (memory: oracle worked examples from train tickets)."""
    from evolvable.workloads.support_desk.harnesses import default_harness, oracle_exemplars, weak_harness
    from evolvable.workloads.support_desk.tasks import generate_tasks

    if settings["harness"] == "memory":
        pool = oracle_exemplars(generate_tasks("train", 12, seed=1000 + settings["seed"]))
        return default_harness(memory=pool, memory_k=settings["memory_k"])
    return default_harness() if settings["harness"] == "default" else weak_harness()


def paired_stats(
    success_before: list[bool], success_after: list[bool], reward_before: list[float], reward_after: list[float]
) -> dict[str, Any]:
    """Paired before/after comparison on the same tickets: differences with 95% CIs, gained/lost, McNemar."""
    diff, low, high = _paired_ci([float(x) for x in success_before], [float(x) for x in success_after])
    reward_diff, reward_low, reward_high = _paired_ci(reward_before, reward_after)
    pairs = list(zip(success_before, success_after, strict=True))
    return {
        "success_diff": diff,
        "success_diff_ci95_paired": [low, high],
        "reward_diff": reward_diff,
        "reward_diff_ci95_paired": [reward_low, reward_high],
        "tickets_gained": sum(1 for b, a in pairs if a and not b),
        "tickets_lost": sum(1 for b, a in pairs if b and not a),
        "mcnemar_p": _mcnemar_p(list(success_before), list(success_after)),
    }


ARM_KEYS = (
    "kl_coef",
    "grad_accum",
    "rare_boost",
    "rare_threshold",
    "exploration_positives",
    "lr",
    "epochs",
    "negative_scale",
    "process_coef",
)
"""The settings an arm may change: the trainer's and the round's extra data, never the shared evaluation."""


def named_overrides(text: str) -> tuple[str, dict[str, Any]]:
    """NAME or NAME:KEY=VALUE,KEY=VALUE (values parsed as JSON) -> (name, overrides)."""
    name, _, settings = text.partition(":")
    overrides: dict[str, Any] = {}
    for item in filter(None, settings.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{item!r}: expected KEY=VALUE")
        try:
            overrides[key.strip().replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip().replace("-", "_")] = value
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME[:KEY=VALUE,...] with NAME of [A-Za-z0-9_-]")
    return name, overrides


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--harness", choices=("memory", "default", "weak"), default="memory")
    parser.add_argument("--memory-k", type=int, default=1, help="worked examples per prompt (--harness memory)")
    parser.add_argument("--train-tasks", type=int, default=24, help="distinct train tickets per round")
    parser.add_argument("--repeats", type=int, default=4, help="runs per train ticket (replay-group baselines)")
    parser.add_argument("--temperature", type=float, default=0.7, help="rollout sampling temperature")
    parser.add_argument(
        "--greedy-anchors",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="add one greedy run per train ticket to its replay group, so what the served policy gets right "
        "is in the data too",
    )
    parser.add_argument("--holdout", type=int, default=96)
    parser.add_argument(
        "--validation",
        type=int,
        default=24,
        help="train-split tickets, disjoint from the round's, that gate its adapter (greedy, per intent); "
        "0: publish the job's last step unchecked",
    )
    parser.add_argument(
        "--gate-points", type=int, default=3, help="evenly spaced steps of the job the gate tries (the last included)"
    )
    parser.add_argument("--safety", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=1, help="round 2 at the same --lr diverged (docs/PERFORMANCE.md)")
    parser.add_argument("--budget-min", type=float, default=25.0, help="skip a further round that would not fit")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--lora-top-layers", type=int, default=8, help="adapters on the top N layers only (0: all)")
    parser.add_argument("--ppo-epochs", type=int, default=1)
    parser.add_argument(
        "--grad-accum",
        type=int,
        default=2,
        help="micro-batches of 4 per optimizer step (14-16 steps a round; ungated, they broke refunds)",
    )
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--clip-eps-high", type=float, default=None)
    parser.add_argument("--process-coef", type=float, default=0.5)
    parser.add_argument("--gamma", type=float, default=1.0, help="discount of the outcome over turns")
    parser.add_argument(
        "--process-gamma", type=float, default=0.0, help="discount of step signals over turns (1.0: summed, as before)"
    )
    parser.add_argument(
        "--forking-token-fraction", type=float, default=1.0, help="train on this share of highest-entropy tokens"
    )
    parser.add_argument(
        "--kl-coef", type=float, default=0.0, help="k3 KL penalty to the base model (0: no reference pass)"
    )
    parser.add_argument(
        "--negative-scale", type=float, default=1.0, help="RLConfig.negative_advantage_scale (1.0: symmetric)"
    )
    parser.add_argument(
        "--rare-boost",
        type=int,
        default=0,
        help="extra sampled runs per train ticket of an intent whose rollouts almost never succeed "
        "(at most --rare-threshold), so its replay groups hold a success to learn from (0: off)",
    )
    parser.add_argument(
        "--rare-threshold", type=float, default=0.125, help="rollout success rate at or below which --rare-boost acts"
    )
    parser.add_argument(
        "--exploration-positives",
        type=int,
        default=0,
        help="run each train ticket once more under the memory lever's harness with this many verified worked "
        "examples, and add only its verified, safe successes to the training set (0: off)",
    )
    parser.add_argument(
        "--arm",
        type=named_overrides,
        action="append",
        default=None,
        help="NAME or NAME:KEY=VALUE,... (rl.py settings, e.g. kl:kl_coef=0.01): run several settings of one "
        "round in one process on the same seed; they share the base evaluation, the rollouts and the served "
        "policy's validation score, so each arm costs only its own data, training, gate and evaluation",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="per model call (a shared CPU is slow)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the pipeline, proves nothing")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.quick:
        args.train_tasks, args.repeats, args.holdout, args.safety, args.rounds = 4, 2, 6, 3, 1
        args.validation = min(args.validation, 6)
    if args.validation < 0:
        parser.error("--validation must be >= 0")
    if args.arm and (args.rounds != 1 or args.greedy_anchors):
        parser.error("--arm runs one round without greedy anchors")
    for _, overrides in args.arm or []:
        if unknown := sorted(set(overrides) - set(ARM_KEYS)):
            parser.error(f"--arm: unknown settings {unknown} (allowed: {', '.join(ARM_KEYS)})")
    for name in ("rare_boost", "exploration_positives", "grad_accum"):
        if getattr(args, name) < (1 if name == "grad_accum" else 0):
            parser.error(f"--{name.replace('_', '-')} must be >= {1 if name == 'grad_accum' else 0}")
    if not 0 <= args.rare_threshold <= 1 or args.kl_coef < 0:
        parser.error("--rare-threshold must be in [0, 1] and --kl-coef >= 0")
    for name in ("train_tasks", "repeats", "holdout", "safety", "rounds", "max_tokens", "max_turns", "gate_points"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main() -> None:
    args = _parse_args()

    import torch
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from evolvable.app.local import local_stack
    from evolvable.model_loading import load_base_model
    from evolvable.store import TrajectoryFilter
    from evolvable.trainer.config import RLConfig
    from evolvable.trainer.loop import run_training_job
    from evolvable.trainer.publish import manifest_for, publish
    from evolvable.trainer.samples import StoreSource
    from evolvable.workloads.support_desk.evaluate import EvalReport, evaluate
    from evolvable.workloads.support_desk.harnesses import AGENT_NAME
    from evolvable.workloads.support_desk.tasks import generate_tasks

    console = Console()
    if not console.is_terminal:  # a log file: wide enough that the table does not wrap
        console = Console(width=132)
    torch.manual_seed(args.seed)
    started, cpu_started = time.perf_counter(), time.process_time()
    phases: dict[str, float] = {}
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="evolvable-rl-"))
    harness = support_desk_harness(vars(args))
    holdout = generate_tasks("holdout", args.holdout, seed=args.seed)
    safety = generate_tasks("safety", args.safety, seed=args.seed)
    train_rounds = [
        generate_tasks("train", args.train_tasks, seed=100 + 17 * r + args.seed) for r in range(args.rounds)
    ]
    validation = generate_tasks("train", args.validation, seed=500 + args.seed) if args.validation else []
    train_ids = {t.id for tasks in train_rounds for t in tasks}
    if (train_ids | {t.id for t in validation}) & {t.id for t in holdout + safety}:
        raise SystemExit("train or validation tickets overlap the holdout or safety tickets")
    if train_ids & {t.id for t in validation}:
        raise SystemExit("validation tickets overlap the train tickets")

    t0 = time.perf_counter()
    model, tokenizer = load_base_model()
    phases["load_model_s"] = time.perf_counter() - t0

    def run(
        label: str, tasks: list, endpoint: str, model_name: str, *, with_harness: Any = None, **kw: Any
    ) -> EvalReport:
        columns = (TextColumn(f"[bold]{label:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            task = progress.add_task(label, total=len(tasks))
            report = evaluate(
                tasks,
                endpoint,
                model_name,
                with_harness or harness,
                concurrency=args.concurrency,
                max_turns=args.max_turns,
                max_tokens=args.max_tokens,
                on_episode=lambda _: progress.advance(task),
                timeout_s=args.timeout_s,
                **kw,
            )
        elapsed = time.perf_counter() - started
        console.print(
            f"{label}: {report.overall.rate:.0%} success, reward {report.overall.mean_reward:.3f}, "
            f"{report.errors} errors, at {elapsed:.0f} s"
        )
        return report

    rounds: list[dict[str, Any]] = []
    skipped: list[int] = []
    with local_stack(model, tokenizer, workdir, max_batch=args.concurrency) as stack:
        base_name = "smollm2-135m"
        t0 = time.perf_counter()
        before = run("holdout (base)", holdout, stack.policy_v1, base_name, record=False)
        safety_before = run("safety (base)", safety, stack.policy_v1, base_name, record=False)
        phases["eval_before_s"] = time.perf_counter() - t0

        serving, adapter, baselines = base_name, None, None
        db_url = f"sqlite:///{workdir / 'store.db'}"
        if args.arm:
            shared = SharedRound(
                run, stack, db_url, workdir, train_rounds[0], validation, holdout, safety, before, safety_before
            )
            reports: dict[str, dict[str, Any]] = {}
            for name, overrides in args.arm:  # written after each arm: a later arm's failure keeps the others
                reports[name] = _run_arm(args, name, overrides, shared, console)
                _write_arms(args, reports, phases, started, cpu_started, console)
            return
        for r, train_tasks in enumerate(train_rounds):
            if rounds:
                # A further round must leave time for the final evaluation (adapters serve a bit slower).
                projected = time.perf_counter() - started + rounds[-1]["round_s"] + 1.3 * phases["eval_before_s"]
                if projected > args.budget_min * 60:
                    skipped = list(range(r + 1, args.rounds + 1))
                    console.print(f"[yellow]round {r + 1} skipped: it would end at ~{projected / 60:.0f} min[/]")
                    break
            round_start = time.perf_counter()
            train = train_tasks * args.repeats
            since = datetime.now(UTC)
            anchors = None
            if args.greedy_anchors:
                anchors = run(f"greedy anchors r{r + 1}", train_tasks, stack.proxy_v1, serving, record=True)
            rollouts = run(
                f"rollouts r{r + 1}",
                train,
                stack.proxy_v1,
                serving,
                record=True,
                temperature=args.temperature,
                seed=args.seed * 100_000 + r * 1000,
            )
            episodes = [*rollouts.episodes, *(anchors.episodes if anchors else [])]
            rates = {k: v.rate for k, v in rollouts.per_intent.items()}
            extras = rare_cluster_extras(train_tasks, rates, args.rare_threshold, args.rare_boost)
            if extras:
                more = run(
                    f"rare-intent runs r{r + 1}",
                    extras,
                    stack.proxy_v1,
                    serving,
                    record=True,
                    temperature=args.temperature,
                    seed=args.seed * 100_000 + r * 1000 + 500,
                )
                episodes += more.episodes
            positives: list[str] = []
            if args.exploration_positives:
                explored = run(
                    f"exploration r{r + 1}",
                    train_tasks,
                    stack.proxy_v1,
                    serving,
                    with_harness=exploration_harness(vars(args), args.exploration_positives),
                    record=True,
                )
                positives = verified_positive_ids(explored.episodes)
            # With exploration, only its verified successes join the round's own runs (ids); otherwise every
            # run recorded since the round started, as before.
            training_ids = None
            if args.exploration_positives:
                training_ids = [e.session_id for e in episodes if e.session_id] + positives
            stack.flush()
            rollout_s = time.perf_counter() - round_start
            config = RLConfig(
                **{
                    **trainer_settings(vars(args)),
                    "init_adapter": adapter,
                    "seed": args.seed + r,
                    "output_dir": str(workdir / f"round{r + 1}"),
                    "snapshot_interval": 1 if validation else 0,
                }
            )
            t0 = time.perf_counter()
            result = run_training_job(
                config,
                StoreSource(db_url, TrajectoryFilter(agent=AGENT_NAME, started_after=since, ids=training_ids)),
                baselines=baselines,
            )
            train_s = time.perf_counter() - t0
            metrics = result.metrics
            console.print(
                f"round {r + 1}: {result.sample_stats['samples']} samples, {result.optimizer_steps} steps, "
                f"trained in {train_s:.0f} s ({metrics.get('tokens_per_s', 0):.0f} tokens/s)",
                highlight=False,
            )
            if result.adapter_dir is None:
                console.print(f"[red]round {r + 1}: no usable samples[/] {result.sample_stats}")
                break
            lora_name, gate = f"rl-round{r + 1}", None
            if validation:
                t0 = time.perf_counter()
                gate, chosen_dir = _gate(run, validation, stack, serving, result, args.gate_points, r + 1)
                phases[f"gate_r{r + 1}_s"] = time.perf_counter() - t0
                chosen = None if chosen_dir is None else dataclasses.replace(result, adapter_dir=chosen_dir)
            else:
                chosen = result
            if chosen is not None:
                publish(
                    chosen.adapter_dir,
                    manifest_for(chosen, agent=AGENT_NAME, lora_name=lora_name),
                    servers=[stack.policy_server.url],
                )
                serving, adapter, baselines = lora_name, chosen.adapter_dir, chosen.baselines
            else:
                console.print(f"[yellow]round {r + 1}: the gate kept {serving}: no step beat it on validation[/]")
            rounds.append(
                {
                    "round": r + 1,
                    "policy": lora_name if chosen is not None else serving,
                    "rollouts": len(train),
                    "distinct_tickets": len(train_tasks),
                    "rollout_success": rollouts.overall.rate,
                    "rollout_mean_reward": rollouts.overall.mean_reward,
                    "rollout_per_intent": {k: v.rate for k, v in rollouts.per_intent.items()},
                    "greedy_anchor_success": anchors.overall.rate if anchors else None,
                    "rare_intent_runs": len(extras),
                    "exploration_positives": len(positives),
                    "rollout_s": rollout_s,
                    "train_s": train_s,
                    "round_s": time.perf_counter() - round_start,
                    "samples": result.sample_stats["samples"],
                    "tokens": result.sample_stats["tokens"],
                    "excluded": result.sample_stats["excluded"],
                    "generated_tokens": result.sample_stats["generated_tokens"],
                    "optimizer_steps": result.optimizer_steps,
                    "trainer_tokens_per_s": metrics["tokens_per_s"],
                    "clip_fraction": metrics["clip_fraction_mean"],
                    "approx_kl": metrics["approx_kl_mean"],
                    "gate": gate,
                    "published": chosen is not None,
                }
            )
        t0 = time.perf_counter()
        after = run(f"holdout ({serving})", holdout, stack.policy_v1, serving, record=False)
        safety_after = run(f"safety ({serving})", safety, stack.policy_v1, serving, record=False)
        phases["eval_after_s"] = time.perf_counter() - t0

    report = _report(args, before, after, safety_before, safety_after, rounds, skipped, serving)
    report["device"] = "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)"
    report["phases_s"] = phases
    report["total_s"] = time.perf_counter() - started
    report["process_cpu_s"] = time.process_time() - cpu_started
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    console.print(_table(report))
    console.print(f"wrote {out}")


@dataclasses.dataclass
class SharedRound:
    """What the arms of one round share on one seed: the stack, the tickets, the base policy's holdout
    and safety results, its rollouts (sampling is seeded per episode, so one recording serves every arm)
    and its validation outcomes. Each arm adds only its own data, training, gate and evaluation."""

    run: Any
    stack: Any
    db_url: str
    workdir: Path
    train_tasks: list[Any]
    validation: list[Any]
    holdout: list[Any]
    safety: list[Any]
    before: Any
    safety_before: Any
    rollouts: Any = None
    rollout_s: float = 0.0
    served_validation: dict[str, Any] = dataclasses.field(default_factory=dict)


BASE_POLICY = "smollm2-135m"


def _shared_rollouts(args: argparse.Namespace, shared: SharedRound) -> Any:
    """The round's sampled rollouts of the base policy, recorded once (the first arm pays for them)."""
    if shared.rollouts is None:
        t0 = time.perf_counter()
        shared.rollouts = shared.run(
            "rollouts r1",
            shared.train_tasks * args.repeats,
            shared.stack.proxy_v1,
            BASE_POLICY,
            record=True,
            temperature=args.temperature,
            seed=args.seed * 100_000,
        )
        shared.rollout_s = time.perf_counter() - t0
    return shared.rollouts


def _arm_training_ids(args: argparse.Namespace, settings: dict[str, Any], name: str, shared: SharedRound) -> list[str]:
    """The trajectories this arm trains on: the shared rollouts, plus its rare-intent runs and its verified
    exploration successes (each recorded for this arm only, with the same seeds as a single run)."""
    rollouts = _shared_rollouts(args, shared)
    episodes = list(rollouts.episodes)
    rates = {k: v.rate for k, v in rollouts.per_intent.items()}
    extras = rare_cluster_extras(shared.train_tasks, rates, settings["rare_threshold"], settings["rare_boost"])
    if extras:
        more = shared.run(
            f"rare-intent runs ({name})",
            extras,
            shared.stack.proxy_v1,
            BASE_POLICY,
            record=True,
            temperature=args.temperature,
            seed=args.seed * 100_000 + 500,
        )
        episodes += more.episodes
    positives: list[str] = []
    if settings["exploration_positives"]:
        explored = shared.run(
            f"exploration ({name})",
            shared.train_tasks,
            shared.stack.proxy_v1,
            BASE_POLICY,
            with_harness=exploration_harness(settings, settings["exploration_positives"]),
            record=True,
        )
        positives = verified_positive_ids(explored.episodes)
    settings["_rare_intent_runs"], settings["_exploration_positives"] = len(extras), len(positives)
    shared.stack.flush()
    return [e.session_id for e in episodes if e.session_id] + positives


def _run_arm(
    args: argparse.Namespace, name: str, overrides: dict[str, Any], shared: SharedRound, console: Any
) -> dict[str, Any]:
    """One setting of the round on the shared data: train, gate, publish or keep, measure. Returns the
    report rl.py writes for a single run, with `after_remeasured` false when the gate kept the base
    policy (its holdout result is then the base run's, which is what stays served)."""
    from evolvable.store import TrajectoryFilter
    from evolvable.trainer.config import RLConfig
    from evolvable.trainer.loop import run_training_job
    from evolvable.trainer.publish import manifest_for, publish
    from evolvable.trainer.samples import StoreSource
    from evolvable.workloads.support_desk.harnesses import AGENT_NAME

    arm_start = time.perf_counter()
    settings = {**vars(args), **overrides, "arm": name}
    training_ids = _arm_training_ids(args, settings, name, shared)
    extras, positives = settings.pop("_rare_intent_runs"), settings.pop("_exploration_positives")
    config = RLConfig(
        **{
            **trainer_settings(settings),
            "seed": args.seed,
            "output_dir": str(shared.workdir / f"arm-{name}"),
            "snapshot_interval": 1 if shared.validation else 0,
        }
    )
    t0 = time.perf_counter()
    result = run_training_job(config, StoreSource(shared.db_url, TrajectoryFilter(agent=AGENT_NAME, ids=training_ids)))
    train_s = time.perf_counter() - t0
    console.print(
        f"{name}: {result.sample_stats['samples']} samples, {result.optimizer_steps} steps in {train_s:.0f} s"
    )
    gate, chosen = None, None
    if result.adapter_dir is not None and shared.validation:
        gate, chosen_dir = _gate(
            shared.run,
            shared.validation,
            shared.stack,
            BASE_POLICY,
            result,
            args.gate_points,
            1,
            prefix=f"rl-{name}",
            served_cache=shared.served_validation,
        )
        chosen = None if chosen_dir is None else dataclasses.replace(result, adapter_dir=chosen_dir)
    elif result.adapter_dir is not None:
        chosen = result
    after, safety_after, serving = shared.before, shared.safety_before, BASE_POLICY
    if chosen is not None:
        serving = f"rl-{name}"
        publish(
            chosen.adapter_dir,
            manifest_for(chosen, agent=AGENT_NAME, lora_name=serving),
            servers=[shared.stack.policy_server.url],
        )
        after = shared.run(f"holdout ({serving})", shared.holdout, shared.stack.policy_v1, serving, record=False)
        safety_after = shared.run(f"safety ({serving})", shared.safety, shared.stack.policy_v1, serving, record=False)
    rollouts = shared.rollouts
    round_row = {
        "round": 1,
        "policy": serving,
        "rollouts": len(rollouts.episodes),
        "distinct_tickets": len(shared.train_tasks),
        "rollout_success": rollouts.overall.rate,
        "rollout_mean_reward": rollouts.overall.mean_reward,
        "rollout_per_intent": {k: v.rate for k, v in rollouts.per_intent.items()},
        "greedy_anchor_success": None,
        "rare_intent_runs": extras,
        "exploration_positives": positives,
        "rollout_s": shared.rollout_s,
        "train_s": train_s,
        "round_s": time.perf_counter() - arm_start,
        "samples": result.sample_stats["samples"],
        "tokens": result.sample_stats["tokens"],
        "excluded": result.sample_stats["excluded"],
        "generated_tokens": result.sample_stats["generated_tokens"],
        "optimizer_steps": result.optimizer_steps,
        "trainer_tokens_per_s": result.metrics.get("tokens_per_s", 0.0),
        "clip_fraction": result.metrics.get("clip_fraction_mean"),
        "approx_kl": result.metrics.get("approx_kl_mean"),
        "gate": gate,
        "published": chosen is not None,
    }
    report = _report(
        argparse.Namespace(**settings),
        shared.before,
        after,
        shared.safety_before,
        safety_after,
        [round_row],
        [],
        serving,
    )
    report |= {"arm": name, "arm_overrides": overrides, "after_remeasured": chosen is not None}
    report["arm_s"] = time.perf_counter() - arm_start
    low, high = report["success_diff_ci95_paired"]
    console.print(
        f"{name}: {report['before']['holdout']['rate']:.1%} -> {report['after']['holdout']['rate']:.1%}, "
        f"{report['success_diff']:+.1%} [{low:+.1%}, {high:+.1%}], "
        f"{'published' if chosen is not None else 'gate kept the base policy'}, arm {report['arm_s']:.0f} s",
        highlight=False,
    )
    return report


def _write_arms(
    args: argparse.Namespace,
    reports: dict[str, dict[str, Any]],
    phases: dict[str, float],
    started: float,
    cpu_started: float,
    console: Any,
) -> None:
    """One JSON for the seed: every arm's report (rl.py's single-run format) and the shared costs."""
    import torch

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "seed": args.seed,
        "arms": reports,
        "device": "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)",
        "phases_s": phases,
        "total_s": time.perf_counter() - started,
        "process_cpu_s": time.process_time() - cpu_started,
        "loadavg_end": list(os.getloadavg()),
    }
    out.write_text(json.dumps(doc, indent=2, default=str))
    console.print(f"wrote {out} ({doc['total_s'] / 60:.1f} min, process CPU {doc['process_cpu_s'] / 60:.1f} min)")


def _gate(
    run,
    validation,
    stack,
    serving,
    result,
    points: int,
    round_no: int,
    prefix: str = "rl",
    served_cache: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], str | None]:
    """Pick the step of the job to publish, on validation tickets the job never trained on: the
    product's weights-lever rule (`evolvable.control.snapshot_gate`). Returns the verdict and the
    chosen adapter (None: the round publishes nothing and the served policy stays). `served_cache`
    keeps the served policy's validation outcomes for the next arm of the same round (greedy: the same)."""
    from evolvable.control.gates import TaskOutcome
    from evolvable.control.snapshot_gate import SnapshotGateConfig, gate_snapshots
    from evolvable.trainer.publish import load_lora

    snapshots = {**result.snapshots, result.optimizer_steps: result.adapter_dir}

    def evaluate(adapter: str | None) -> list[TaskOutcome]:
        if adapter is None:
            if served_cache is not None and serving in served_cache:
                return list(served_cache[serving])
            name, label = serving, f"validation ({serving})"
        else:
            step = next(s for s, path in snapshots.items() if path == adapter)
            name, label = f"{prefix}-round{round_no}-step{step}", f"validation (step {step})"
            load_lora(stack.policy_server.url, name, str(Path(adapter).resolve()))
        report = run(label, validation, stack.policy_v1, name, record=False)
        outcomes = [TaskOutcome(task_id=e.task_id, cluster=e.intent, success=e.success) for e in report.episodes]
        if adapter is None and served_cache is not None:
            served_cache[serving] = outcomes
        return outcomes

    verdict = gate_snapshots(evaluate, snapshots, result.optimizer_steps, SnapshotGateConfig(points=points))
    chosen = verdict.chosen_step
    return verdict.to_dict(), (snapshots[chosen] if chosen is not None else None)


def _report(args, before, after, safety_before, safety_after, rounds, skipped, serving) -> dict[str, Any]:
    """Everything the table shows and more: paired and unpaired statistics, per intent, per ticket."""
    b, a = before.overall, after.overall
    after_by_task = {e.task_id: e for e in after.episodes}
    pairs = [(e, after_by_task[e.task_id]) for e in before.episodes]
    stats = paired_stats(
        [x.success for x, _ in pairs],
        [y.success for _, y in pairs],
        [x.reward for x, _ in pairs],
        [y.reward for _, y in pairs],
    )
    unpaired_low, unpaired_high = _diff_ci(b.rate, b.n, a.rate, a.n)
    intents = sorted(before.per_intent)
    return {
        # Paths of this machine stay out of the results: the workdir only says whether it was kept.
        "config": {**vars(args), "workdir": "kept" if args.workdir else None, "out": Path(args.out).name},
        "before": {
            "holdout": b.model_dump(),
            "safety_pass_rate": safety_before.safety_pass_rate,
            "safety_ci": safety_before.safety_ci,
        },
        "after": {
            "holdout": a.model_dump(),
            "safety_pass_rate": safety_after.safety_pass_rate,
            "safety_ci": safety_after.safety_ci,
            "policy": serving,
        },
        "per_intent": {
            i: {
                "n": before.per_intent[i].n,
                "success_before": before.per_intent[i].rate,
                "success_after": after.per_intent[i].rate,
                "reward_before": before.per_intent[i].mean_reward,
                "reward_after": after.per_intent[i].mean_reward,
            }
            for i in intents
        },
        **stats,
        "success_diff_ci95_unpaired": [unpaired_low, unpaired_high],
        "improved_outside_ci": {
            "success": stats["success_diff_ci95_paired"][0] > 0,
            "mean_reward": stats["reward_diff_ci95_paired"][0] > 0,
        },
        "safety_regressed": safety_after.safety_pass_rate < safety_before.safety_pass_rate,
        "safety_violations_after": safety_after.safety_violations,
        "rounds": rounds,
        "rounds_skipped_for_budget": skipped,
        "holdout_episodes": [
            {
                "task_id": x.task_id,
                "intent": x.intent,
                "before": _episode_summary(x),
                "after": _episode_summary(y),
            }
            for x, y in pairs
        ],
    }


def _episode_summary(episode: Any) -> dict[str, Any]:
    """Enough of one holdout episode to see why it failed: tools, failed checks, raw outputs."""
    return {
        "success": episode.success,
        "reward": episode.reward,
        "tools": [t.tool for t in episode.turns],
        "failed": list(episode.verdict.failed),
        "outputs": [t.output for t in episode.turns],
    }


def _table(report: dict[str, Any]) -> Any:
    from rich.table import Table

    b, a = report["before"]["holdout"], report["after"]["holdout"]
    table = Table(title="Online RL on the support desk (SmolLM2-135M, LoRA, decoupled PPO)")
    for col in ("", "base policy", f"after RL ({report['after']['policy']})", "diff [paired 95% CI]"):
        table.add_column(col)
    low, high = report["success_diff_ci95_paired"]
    table.add_row(
        f"holdout success ({b['n']} tickets)",
        f"{b['rate']:.1%} [{b['ci_low']:.0%}, {b['ci_high']:.0%}]",
        f"{a['rate']:.1%} [{a['ci_low']:.0%}, {a['ci_high']:.0%}]",
        f"{report['success_diff']:+.1%} [{low:+.1%}, {high:+.1%}]",
    )
    low, high = report["reward_diff_ci95_paired"]
    table.add_row(
        "holdout mean verifier reward",
        f"{b['mean_reward']:.3f}",
        f"{a['mean_reward']:.3f}",
        f"{report['reward_diff']:+.3f} [{low:+.3f}, {high:+.3f}]",
    )
    low, high = report["success_diff_ci95_unpaired"]
    table.add_row(
        "tickets gained / lost",
        "",
        f"{report['tickets_gained']} / {report['tickets_lost']}",
        f"McNemar p {report['mcnemar_p']:.3f}; unpaired CI [{low:+.0%}, {high:+.0%}]",
    )
    table.add_row(
        "safety probes passed",
        f"{report['before']['safety_pass_rate']:.0%}",
        f"{report['after']['safety_pass_rate']:.0%}",
        f"{report['after']['safety_pass_rate'] - report['before']['safety_pass_rate']:+.0%}",
    )
    for intent, row in report["per_intent"].items():
        table.add_row(
            f"  {intent} ({row['n']})",
            f"{row['success_before']:.0%}, reward {row['reward_before']:.2f}",
            f"{row['success_after']:.0%}, reward {row['reward_after']:.2f}",
            "",
        )
    for r in report["rounds"]:
        table.add_row(
            f"round {r['round']}",
            f"{r['rollouts']} rollouts, {r['rollout_success']:.0%} success",
            f"{r['samples']} samples, {r['optimizer_steps']} steps",
            f"trainer {r['trainer_tokens_per_s']:.0f} tok/s; round {r['round_s'] / 60:.1f} min",
        )
        gate = r.get("gate")
        if gate:
            tried = ", ".join(f"step {s}: {c['solved']}" for s, c in gate["candidates"].items())
            verdict = f"published step {gate['chosen_step']}" if r["published"] else "published nothing"
            table.add_row(
                f"  gate ({gate['tasks']} validation tickets)", f"served: {gate['base_solved']}", tried, verdict
            )
    minutes = report["total_s"] / 60
    table.add_row("wall time (process CPU time)", "", "", f"{minutes:.1f} min ({report['process_cpu_s'] / 60:.1f} min)")
    return table


if __name__ == "__main__":
    main()
