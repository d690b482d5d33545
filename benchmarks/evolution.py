"""Evolution benchmark: does the control plane improve a weak agent on the embedded model?

For either built-in workload (`--workload support_desk|it_helpdesk`), from its `weak_harness()`,
every arm gets the same live-traffic budget (the same train tickets, in the same batches) and the
control plane ticks after each batch:

    static    no evolution
    memory / tool / skill / prompt   one lever only
    auto      automatic lever choice (all harness levers; weights when a trainer is installed), with
              the embedded model as evolver model (playbook edits) and as judge
    recorded  like auto, but the workload plugin is disabled for the gates: candidates are gated by
              replaying recorded traffic under them, judged by the embedded model
              (control/recorded_replay.py); the holdout below still uses the workload's verifiers

Each arm's control plane is built by the composition root (`evolvable.app.build_control_only`) from a
configuration, as `evolvable serve` and `evolvable demo` build theirs: its own SQLite store, the levers
of the arm, the workload plugin (entry point `support_desk` / `it_helpdesk`) for the gates and
exploration, the embedded policy server as upstream (and as evolver and judge model in the model arms).
Candidates go through the real gates (safety probes, paired replay on the plugin's gate tickets, a
seed disjoint from the report set) and a canary (50% of new sessions, routed by `HarnessRouter.assign`).
At the end the arm's active harness is evaluated on the report set (`--holdout` tickets; success with a
Wilson 95% CI) and the safety split (probe pass rate). Report episodes are memoised by (harness, task):
greedy decoding makes them deterministic, so identical work is never paid twice across arms.

    python benchmarks/evolution.py [--workload it_helpdesk] [--batches 3 --batch-size 16 --holdout 18 --safety 9]
    python benchmarks/evolution.py --quick      # a small run for a loaded machine
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from evolvable.app.config import EvolvableConfig, parse_config
from evolvable.app.stack import build_control_only
from evolvable.control.decision import HARNESS_LEVERS
from evolvable.control.models import Lever, VersionKind, VersionState
from evolvable.control.router import HarnessRouter
from evolvable.control.stats_math import wilson_interval
from evolvable.policy_server.launcher import policy_server
from evolvable.protocol.harness import Harness
from evolvable.protocol.models import new_id, utcnow

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import LoadMonitor, describe, environment

RESULTS = Path(__file__).parent / "results" / "evolution.json"
console = Console()
MODEL_ARMS = frozenset({"auto", "recorded"})
"""Arms whose evolver model and judge are the embedded model."""


class Bench(NamedTuple):
    """What the benchmark needs of a workload: its agent, weak start, runner and task generator.

    (A NamedTuple, not a dataclass: tests load this script as a module without registering it.)"""

    name: str
    agent: str
    weak_harness: Callable[[], Harness]
    runner: Any
    generate: Callable[..., list]
    workload: str = "support_desk"
    """The workload plugin's entry point, which gives the arms' gates their tickets and probes."""


def bench_for(args: argparse.Namespace, endpoint: str) -> Bench:
    if args.workload == "it_helpdesk":
        from evolvable.workloads.it_helpdesk.agent import ItHelpdeskRunner
        from evolvable.workloads.it_helpdesk.harnesses import AGENT_NAME, weak_harness
        from evolvable.workloads.it_helpdesk.tasks import generate_tasks

        runner: Any = ItHelpdeskRunner(
            endpoint,
            args.model,
            concurrency=args.concurrency,
            max_turns=args.max_turns,
            max_tokens=args.max_tokens,
            timeout_s=1800,
        )
        return Bench("IT helpdesk", AGENT_NAME, weak_harness, runner, generate_tasks, "it_helpdesk")
    from evolvable.workloads.support_desk.replay import SupportDeskRunner

    runner = SupportDeskRunner(
        endpoint,
        args.model,
        concurrency=args.concurrency,
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        timeout_s=1800,
    )
    return support_desk_bench(runner)


POLICY_SERVER = "policy"


def option(args: argparse.Namespace, name: str, default: Any) -> Any:
    """An argument the command line always sets and a test's Namespace may leave out."""
    value = getattr(args, name, None)
    return default if value is None else value


def arm_configuration(
    name: str, levers: frozenset[Lever], args: argparse.Namespace, bench: Bench, workdir: Path
) -> EvolvableConfig:
    """What `evolvable.yaml` would say for one arm. Thresholds are scaled to the live budget: a decision
    after one batch, a canary verdict within one; the gates are not relaxed."""
    n = args.batch_size
    harness_file = workdir / "start_harness.json"
    harness_file.write_text(bench.weak_harness().model_dump_json(indent=2))
    endpoint = option(args, "endpoint_used", None)
    model_arm = name in MODEL_ARMS and endpoint is not None and option(args, "model_evolver", True)
    agent: dict[str, Any] = {
        "name": bench.agent,
        "policy": {"base_model": args.model, "upstream": POLICY_SERVER},
        "harness": str(harness_file),
    }
    if name == "recorded":  # no workload plugin: the gates replay recorded traffic, judged by the model
        agent["recorded_replay"] = {"per_cluster": option(args, "recorded_per_cluster", 4), "refresh_s": 0}
    else:
        agent["workload"] = {
            "entry_point": bench.workload,
            "options": {
                "seed": option(args, "gate_seed", 12),
                "gate_tasks": option(args, "gate_tasks", 24),
                "safety_tasks": option(args, "safety", 8),
                "concurrency": option(args, "concurrency", 8),
                "max_turns": option(args, "max_turns", 4),
                "max_tokens": option(args, "max_tokens", 64),
            },
        }
    model: dict[str, Any] = {
        "upstream": POLICY_SERVER,
        "model": args.model,
        "timeout_s": 1800,
        # The embedded 135M model answers JSON requests in prose: its answers are prefilled (model_call.py).
        "prefill": True,
        "max_tokens": option(args, "evolver_tokens", 200),
    }
    control: dict[str, Any] = {
        "tick_interval_s": 0,  # the benchmark ticks after each batch
        "time_budget_s": 7200,
        "levers": sorted({lv.value for lv in levers} | {Lever.rollback.value}),
        "decision": {
            "min_runs": n,
            "min_cluster_runs": 1,
            "recurring_label_min": 2,
            "argument_error_min": 2,
            "weights_min_runs": 4 * n,
        },
        "gates": {"alpha": 0.05},
        "canary": {"share": 0.5, "min_runs": max(2, n // 3)},
        "verdict_min_runs": max(2, n // 2),
        "memory": {"explore_tasks": option(args, "explore_tasks", 2)},
        "weights": {"output_dir": str(workdir / "adapters"), "launcher": {"kind": "inline"}},
    }
    if model_arm:
        control["evolver"] = model
        control["judge"] = model
    data = {
        "store": {"url": f"sqlite:///{workdir / 'store.db'}"},
        "proxy": {"spool_dir": str(workdir / "spool")},
        "policy_servers": [{"name": POLICY_SERVER, "kind": "embedded", "url": endpoint or "http://127.0.0.1:9"}],
        "agents": [agent],
        "control": control,
    }
    return parse_config(data, source=f"the {name} arm of the evolution benchmark")


def support_desk_bench(runner: Any) -> Bench:
    from evolvable.workloads.support_desk.harnesses import AGENT_NAME, weak_harness
    from evolvable.workloads.support_desk.tasks import generate_tasks

    return Bench("support desk", AGENT_NAME, weak_harness, runner, generate_tasks)


def run_arm(
    name: str,
    levers: frozenset[Lever],
    args: argparse.Namespace,
    bench: Bench | Any,
    tasks: dict,
    progress: Progress,
    workdir: Path | None = None,
) -> dict:
    """One arm; `bench` may also be a bare support-desk runner (the loop test passes one)."""
    if not isinstance(bench, Bench):
        bench = support_desk_bench(bench)
    workdir = workdir or Path(tempfile.mkdtemp(prefix=f"evolution-{name}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    stack = build_control_only(arm_configuration(name, levers, args, bench, workdir))
    assert stack.planes is not None
    store = stack.store
    plane = stack.planes.plane("default")
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    runner, agent = bench.runner, bench.agent
    started = time.perf_counter()
    log: list[str] = []
    bar = progress.add_task(f"{name}", total=args.batches)
    for b in range(args.batches):
        batch = tasks["train"][b * args.batch_size : (b + 1) * args.batch_size]
        router.refresh()
        groups: dict[str, list] = {}
        for task in batch:
            version = router.assign(agent, f"{name}-{b}-{task.id}").harness_version
            groups.setdefault(version, []).append(task)
        for version, group in groups.items():
            harness = plane.registry.get(version).harness()
            for episode in runner.episodes(harness, None, group):
                t = episode.trajectory
                store.put_trajectory(
                    t.model_copy(update={"id": new_id("traj"), "started_at": utcnow(), "harness_version": version})
                )
        if levers:
            report = plane.tick()
            log += [f"batch {b + 1}: {a}" for a in report.actions]
        progress.advance(bar)
    active = plane.registry.current(agent, VersionKind.harness, VersionState.active)
    holdout = runner.run(active.harness(), None, tasks["holdout"])
    safety = runner.run(active.harness(), None, tasks["safety"])
    wins = sum(1 for o in holdout if o.success and not o.violation)
    safe = sum(1 for o in safety if not o.violation)
    decisions = [
        {
            "lever": d.lever.value,
            "state": d.state.value,
            "verdict": d.verdict.value if d.verdict else None,
            "rationale": d.rationale,
            "gates": {k: v.get("reason") for k, v in d.gates.items() if isinstance(v, dict)},
        }
        for d in reversed(plane.journal.decisions(agent))
    ]
    status = plane.status(agent)[agent]
    stack.close()
    return {
        "arm": name,
        "levers": sorted(lv.value for lv in levers),
        "holdout_success": wins / len(holdout),
        "holdout_ci": wilson_interval(wins, len(holdout)),
        "holdout_n": len(holdout),
        "safety_pass": safe / len(safety),
        "safety_n": len(safety),
        "active_version": active.id,
        "decisions": decisions,
        "log": log,
        "judge": status["judge"],
        "calibration": status["calibration"],
        "wall_s": time.perf_counter() - started,
    }


def write_results(
    args: argparse.Namespace, runner: Any, results: list[dict], total_s: float, load: dict[str, Any]
) -> None:
    """Written after every arm, so a long run that is cut short still leaves what it measured."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[1]
    out = args.out.resolve()
    shown = str(out.relative_to(root)) if out.is_relative_to(root) else out.name  # no machine paths in results
    payload = {
        "args": {**vars(args), "out": shown},
        "episodes_run": runner.episodes_run,
        "total_s": total_s,
        "load_average": load,
        "environment": environment(load),
        "arms": results,
    }
    args.out.write_text(json.dumps(payload, indent=2, default=str))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--endpoint", default=None, help="Use a running policy server instead of starting one.")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--holdout", type=int, default=18)
    parser.add_argument("--safety", type=int, default=9)
    parser.add_argument("--arms", default="static,auto,memory,skill,prompt,tool,recorded")
    parser.add_argument("--workload", choices=("support_desk", "it_helpdesk"), default="support_desk")
    parser.add_argument(
        "--quick", action="store_true", help="2 batches of 8, holdout 10, safety 4: for a loaded machine."
    )
    parser.add_argument(
        "--no-model-evolver",
        dest="model_evolver",
        action="store_false",
        help="Deterministic edits and no judge in the model arms (auto, recorded).",
    )
    parser.add_argument("--gate-tasks", type=int, default=24, help="The workload plugin's gate tickets per arm.")
    parser.add_argument("--gate-seed", type=int, default=12, help="Seed of the plugin's gate tickets and probes.")
    parser.add_argument("--evolver-tokens", type=int, default=200, help="max_tokens of the evolver and judge model.")
    parser.add_argument("--recorded-per-cluster", type=int, default=4, help="Gate tasks per cluster, recorded arm.")
    parser.add_argument("--out", type=Path, default=None, help="Where the JSON results go.")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--explore-tasks", type=int, default=2, help="Recorded failed tickets per cluster the memory lever searches."
    )
    args = parser.parse_args()
    if args.quick:
        args.batches, args.batch_size, args.holdout, args.safety = 2, 8, 10, 4
    suffix = "" if args.workload == "support_desk" else f"-{args.workload}"
    args.out = args.out or RESULTS.with_name(f"evolution{suffix}{'-quick' if args.quick else ''}.json")
    server = None
    endpoint = args.endpoint
    if endpoint is None:
        with console.status("starting the embedded policy server"):
            server = policy_server(args.model, max_batch=16)
            endpoint = server.__enter__()
    try:
        args.endpoint_used = endpoint
        bench = bench_for(args, endpoint)
        runner = bench.runner
        tasks = {
            "train": bench.generate("train", args.batches * args.batch_size, seed=11),
            "holdout": bench.generate("holdout", args.holdout, seed=12),
            "safety": bench.generate("safety", args.safety, seed=13),
        }
        arms = {
            "static": frozenset(),
            "memory": frozenset({Lever.memory}),
            "tool": frozenset({Lever.tool}),
            "skill": frozenset({Lever.skill}),
            "prompt": frozenset({Lever.prompt}),
            "weights": frozenset({Lever.weights}),
            "auto": HARNESS_LEVERS | {Lever.weights},
            "recorded": HARNESS_LEVERS,
        }
        results = []
        t0 = time.perf_counter()
        with Progress(console=console) as progress, LoadMonitor() as monitor:
            for name in args.arms.split(","):
                results.append(run_arm(name, arms[name], args, bench, tasks, progress))
                r = results[-1]
                write_results(args, runner, results, time.perf_counter() - t0, monitor.summary())
                console.print(f"[bold]{name}[/]: holdout {r['holdout_success']:.0%}, safety {r['safety_pass']:.0%}")
                for line in r["log"]:
                    console.print(f"   {line}", highlight=False)
        total_s = time.perf_counter() - t0
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    static = next((r for r in results if r["arm"] == "static"), None)
    table = Table(title=f"Evolution on {bench.name} (embedded {args.model}, weak starting harness)")
    for col in ("arm", "holdout success (95% CI)", "vs static", "safety pass", "decisions (lever: state/verdict)"):
        table.add_column(col)
    for r in results:
        lo, hi = r["holdout_ci"]
        ratio = (
            f"{r['holdout_success'] / static['holdout_success']:.2f}x"
            if static and static["holdout_success"]
            else f"{(r['holdout_success'] - static['holdout_success']) * 100:+.0f} pts"
            if static
            else "-"
        )
        summary = "; ".join(f"{d['lever']}: {d['state']}/{d['verdict'] or '-'}" for d in r["decisions"]) or "-"
        table.add_row(
            r["arm"],
            f"{r['holdout_success']:.0%} ({lo:.0%}-{hi:.0%}) n={r['holdout_n']}",
            ratio,
            f"{r['safety_pass']:.0%} n={r['safety_n']}",
            summary,
        )
    console.print(table)
    load = monitor.summary()
    console.print(describe(load))
    write_results(args, runner, results, total_s, load)
    console.print(f"{runner.episodes_run} episodes in {total_s:.0f} s; wrote {args.out}")


if __name__ == "__main__":
    main()
