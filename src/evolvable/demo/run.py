"""`evolvable demo`: the whole loop on the embedded defaults, measured.

    policy server (SmolLM2-135M)  <-  proxy (governance, harness router)  <-  support-desk agent
                                        |  trajectories + signals
                                        v
                                   store (SQLite)  ->  control plane: decide, evolve, gate, canary

1. Baseline: the starting (deliberately weak) harness on a held-out report set and the safety probes.
2. Live rounds: support tickets run through the proxy, which applies the active or canary harness;
   the agent posts tool steps and verifier signals; after each round the control plane ticks once
   (statistics -> lever -> candidate -> safety + replay gates -> canary -> promote or roll back).
3. After: whatever is active at the end, on the same report set and probes.

The replay gate uses its own held-out tasks, disjoint from the report set, so the final figures
are not the tasks the gate selected on.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from evolvable.demo.config import DemoConfig, RoundRecord
from evolvable.demo.report import write_report
from evolvable.demo.tuning import POLICY_SERVER, demo_configuration


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def run_demo(cfg: DemoConfig, console: Console | None = None) -> dict[str, Any]:
    """Run the loop and write the report folder; returns the summary that summary.json holds."""
    from evolvable.app import build_stack
    from evolvable.control.models import VersionKind, VersionState
    from evolvable.demo.services import ProxyServer
    from evolvable.workloads.support_desk import AGENT_NAME, default_harness, evaluate, generate_tasks, weak_harness

    console = console or Console()
    started = time.perf_counter()
    cfg.report_dir.mkdir(parents=True, exist_ok=True)
    report_set = generate_tasks("holdout", cfg.report_tasks, seed=cfg.seed)
    train_set = generate_tasks("train", cfg.rounds * cfg.round_size, seed=cfg.seed)
    eval_kw: dict[str, Any] = {"max_tokens": cfg.max_tokens, "max_turns": cfg.max_turns, "concurrency": cfg.concurrency}
    start_harness = weak_harness() if cfg.start == "weak" else default_harness()
    harness_file = cfg.report_dir / "start_harness.json"
    harness_file.write_text(start_harness.model_dump_json(indent=2))

    with contextlib.ExitStack() as resources:
        with console.status("starting the embedded policy server (the first start converts the model, ~30 s)"):
            stack = resources.enter_context(build_stack(demo_configuration(cfg, harness_file), log_dir=cfg.report_dir))
        assert stack.planes is not None and stack.router is not None and stack.app is not None
        store, router, endpoint = stack.store, stack.router, stack.policy_endpoints[POLICY_SERVER]
        plane = stack.planes.plane("default")
        safety_set = plane.suites[AGENT_NAME].safety
        app = stack.app

        rounds: list[RoundRecord] = []
        with ProxyServer(app) as proxy, _progress(console) as progress:

            def measure(label: str, harness: Any, model: str) -> tuple[Any, Any]:
                bar = progress.add_task(f"{label}: report set", total=len(report_set) + len(safety_set))
                with ThreadPoolExecutor(2) as pool:  # one engine batch for both sets
                    hold, safe = pool.map(
                        lambda tasks: evaluate(
                            tasks, endpoint, model, harness, on_episode=lambda _: progress.advance(bar), **eval_kw
                        ),
                        (report_set, safety_set),
                    )
                return hold, safe

            baseline, baseline_safety = measure("baseline", start_harness, cfg.model)
            for r in range(cfg.rounds):
                batch = train_set[r * cfg.round_size : (r + 1) * cfg.round_size]
                bar = progress.add_task(f"round {r + 1}/{cfg.rounds}: live traffic via the proxy", total=len(batch))

                def advance(_: object, bar: TaskID = bar) -> None:
                    progress.advance(bar)

                live = evaluate(
                    batch,
                    proxy.v1,
                    cfg.model,
                    None,
                    record=True,
                    apply_harness="proxy",
                    temperature=cfg.live_temperature,
                    seed=cfg.seed * 1000 + r * 100,
                    on_episode=advance,
                    **eval_kw,
                )
                proxy.flush()
                by_version: dict[str, int] = {}
                for ep in live.episodes:
                    key = ep.harness_version or "?"
                    by_version[key] = by_version.get(key, 0) + 1
                tick_bar = progress.add_task(f"round {r + 1}/{cfg.rounds}: control plane", total=1)
                tick = plane.tick(AGENT_NAME)
                progress.advance(tick_bar)
                router.refresh()
                active = plane.registry.current(AGENT_NAME, VersionKind.harness, VersionState.active)
                canary = plane.registry.current(AGENT_NAME, VersionKind.harness, VersionState.canary)
                policy = plane.registry.current(AGENT_NAME, VersionKind.policy, VersionState.active)
                record = RoundRecord(
                    round=r + 1,
                    episodes=len(live.episodes),
                    success_rate=live.success_rate,
                    by_version=by_version,
                    actions=list(tick.actions),
                    active_harness=active.id if active else None,
                    canary_harness=canary.id if canary else None,
                    active_policy=policy.id if policy else None,
                )
                rounds.append(record)
                for action in tick.actions:
                    progress.console.print(f"  [cyan]control plane[/] {action}", highlight=False)

            active = plane.registry.current(AGENT_NAME, VersionKind.harness, VersionState.active)
            policy = plane.registry.current(AGENT_NAME, VersionKind.policy, VersionState.active)
            final_model = policy.policy().served_model if policy is not None else cfg.model
            assert active is not None, "bootstrap registered an active harness"
            after, after_safety = measure("after", active.harness(), final_model)
            proxy.flush()

        summary = write_report(
            cfg,
            store=store,
            plane=plane,
            baseline=(baseline, baseline_safety),
            after=(after, after_safety),
            rounds=[asdict(r) for r in rounds],
            wall_s=time.perf_counter() - started,
            console=console,
        )
        return summary
