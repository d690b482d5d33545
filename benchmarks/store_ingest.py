"""Store ingest throughput: ATDP step events per second into SQLite and PostgreSQL.

For each backend: `apply_events` in batches of 1, 100 and 1000 events (idempotency
ledger, placeholder handling and all), against the peer a hand-written logger would
be: one plain INSERT per step, one transaction each, no idempotency. Each run uses
fresh trajectories of 8 realistic steps (llm_call with tool calls and token ids,
tool_call results), a signal and an end event; steps/s counts step rows stored.
Also: reading back with `iter_trajectories` (trajectories/s).

    .venv/bin/python benchmarks/store_ingest.py [--postgres URL] [--quick]

Prints a Rich table and writes benchmarks/results/store_ingest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    FunctionCall,
    LLMCallStep,
    Signal,
    StepAppended,
    ToolCall,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
    Usage,
    events_for,
)
from evolvable.settings import get_settings
from evolvable.store import Store, TrajectoryFilter
from evolvable.store.rows import step_row
from evolvable.store.tables.trajectories import steps as steps_table

RESULTS = Path(__file__).parent / "results" / "store_ingest.json"
STEPS_PER_TRAJECTORY = 8


def make_trajectory(i: int) -> Trajectory:
    steps: list[Any] = []
    for turn in range(STEPS_PER_TRAJECTORY // 2):
        call_id = f"call_{i}_{turn}"
        llm = LLMCallStep(
            model="smollm2-135m",
            request_messages=[
                ChatMessage(role="system", content="You are a support agent. Use the tools. " * 4),
                ChatMessage(role="user", content=f"Order {1000 + i}: where is it? It was due last week, turn {turn}."),
            ],
            tools=[{"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}}],
            sampling={"temperature": 0.7, "max_tokens": 128},
            choices=[
                CompletionChoice(
                    message=ChatMessage(
                        role="assistant",
                        tool_calls=[
                            ToolCall(id=call_id, function=FunctionCall(name="lookup_order", arguments='{"id":1}'))
                        ],
                    ),
                    finish_reason="tool_calls",
                    completion_token_ids=list(range(24)),
                    logprobs=[-0.5] * 24,
                )
            ],
            prompt_token_ids=list(range(120)),
            policy_version="base",
            usage=Usage(prompt_tokens=120, completion_tokens=24, total_tokens=144),
            latency_ms=180.0,
            response_id=f"chatcmpl-{i}-{turn}",
        )
        tool = ToolCallStep(
            tool_name="lookup_order",
            arguments={"id": 1000 + i},
            result={"status": "shipped", "carrier": "ups", "eta": "2026-11-25", "items": [{"sku": "A1", "qty": 2}]},
            status="ok",
            tool_call_id=call_id,
            llm_step_id=llm.id,
            latency_ms=4.0,
        )
        steps += [llm, tool]
    return Trajectory(
        agent="support",
        task_input={"ticket": f"order {1000 + i}"},
        metadata={"intent": "order_status"},
        steps=steps,
        signals=[Signal(kind="outcome", value=1.0, source="verifier")],
        status=TrajectoryStatus.completed,
    )


def events_for_steps(n_steps: int) -> list[Any]:
    n = max(1, n_steps // STEPS_PER_TRAJECTORY)
    return [e for i in range(n) for e in events_for(make_trajectory(i))]


def measure_apply(store: Store, batch_size: int, n_steps: int, progress: Progress, label: str) -> dict[str, Any]:
    events = events_for_steps(n_steps)
    task = progress.add_task(label, total=len(events))
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(events), batch_size):
        chunk = events[i : i + batch_size]
        store.apply_events(chunk)
        progress.advance(task, len(chunk))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    progress.remove_task(task)
    steps = sum(isinstance(e, StepAppended) for e in events)
    return _figures(len(events), steps, elapsed, cpu)


def _figures(events: int, steps: int, elapsed: float, cpu: float) -> dict[str, Any]:
    return {
        "events": events,
        "steps": steps,
        "seconds": elapsed,
        "client_cpu_seconds": cpu,
        "steps_per_s": steps / elapsed,
        "steps_per_client_cpu_s": steps / max(cpu, 1e-9),
    }


def measure_naive(store: Store, n_steps: int, progress: Progress, label: str) -> dict[str, Any]:
    """The peer: serialize each step and INSERT it in its own transaction, as a simple logger would
    (no idempotency, no validation; the trajectory rows are inserted beforehand, untimed)."""
    trajectories = [make_trajectory(10_000_000 + i) for i in range(max(1, n_steps // STEPS_PER_TRAJECTORY))]
    store.apply_events([e for t in trajectories for e in events_for(t.model_copy(update={"steps": [], "signals": []}))])
    pending = [(t.id, s) for t in trajectories for s in t.steps]
    task = progress.add_task(label, total=len(pending))
    start, cpu = time.perf_counter(), time.process_time()
    for trajectory_id, step in pending:
        with store.engine.begin() as conn:
            conn.execute(sa.insert(steps_table), step_row(trajectory_id, step))
        progress.advance(task)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    progress.remove_task(task)
    return _figures(len(pending), len(pending), elapsed, cpu)


def measure_read(store: Store, progress: Progress, label: str) -> dict[str, Any]:
    total = store.count(TrajectoryFilter())
    task = progress.add_task(label, total=total)
    start = time.perf_counter()
    n = 0
    for _ in store.iter_trajectories(TrajectoryFilter(), batch_size=200):
        n += 1
        progress.advance(task)
    elapsed = time.perf_counter() - start
    progress.remove_task(task)
    return {"trajectories": n, "seconds": elapsed, "trajectories_per_s": n / elapsed}


def run_backend(name: str, url: str, plan: dict[str, int], progress: Progress) -> dict[str, Any]:
    store = Store.open(url)
    try:
        out: dict[str, Any] = {"naive_1_row_per_tx": measure_naive(store, plan["naive"], progress, f"{name} naive")}
        for batch in (1, 100, 1000):
            out[f"apply_events_batch_{batch}"] = measure_apply(
                store, batch, plan[f"batch_{batch}"], progress, f"{name} batch {batch}"
            )
        out["read_iter_trajectories"] = measure_read(store, progress, f"{name} read")
        return out
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=get_settings().test_postgres_url, help="admin URL of a PostgreSQL server")
    parser.add_argument("--quick", action="store_true", help="a tenth of the work (smoke run)")
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0
    plan = {
        k: int(v * scale) for k, v in {"naive": 600, "batch_1": 320, "batch_100": 6400, "batch_1000": 16000}.items()
    }

    console = Console()
    results: dict[str, Any] = {}
    pg_name = f"bench_store_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(args.postgres, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{pg_name}"'))
        pg_settings = {
            k: conn.exec_driver_sql(f"SHOW {k}").scalar() for k in ("server_version", "synchronous_commit", "fsync")
        }
    try:
        with tempfile.TemporaryDirectory() as tmp, Progress(console=console, transient=True) as progress:
            results["sqlite"] = run_backend("sqlite", f"sqlite:///{Path(tmp) / 'bench.db'}", plan, progress)
            results["postgresql"] = run_backend(
                "postgresql", args.postgres.rsplit("/", 1)[0] + f"/{pg_name}", plan, progress
            )
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)'))
        admin.dispose()

    table = Table(title="Store ingest: steps/s (8-step trajectories, ~1.9 kB JSON per step)")
    table.add_column("method", no_wrap=True)
    short = {"sqlite": "SQLite", "postgresql": "PG"}
    for backend in results:
        table.add_column(f"{short[backend]} steps/s", justify="right")
        table.add_column(f"{short[backend]} × naive", justify="right")
    labels = {
        "naive_1_row_per_tx": "naive: 1 INSERT per tx",
        "apply_events_batch_1": "apply_events, 1 event/call",
        "apply_events_batch_100": "apply_events, 100 events/call",
        "apply_events_batch_1000": "apply_events, 1000 events/call",
    }
    for method, label in labels.items():
        row = [label]
        for backend in results:
            r, base = results[backend][method], results[backend]["naive_1_row_per_tx"]["steps_per_s"]
            r["ratio_vs_naive"] = r["steps_per_s"] / base
            row += [f"{r['steps_per_s']:,.0f}", f"{r['ratio_vs_naive']:.1f}×"]
        table.add_row(*row)
    console.print(table)
    for backend in results:
        read = results[backend]["read_iter_trajectories"]
        console.print(f"{backend}: iter_trajectories reads {read['trajectories_per_s']:,.0f} trajectories/s")

    payload = {
        "benchmark": "store_ingest",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
            "python": platform.python_version(),
        },
        "postgresql": pg_settings,
        "sqlite": {"journal_mode": "wal", "synchronous": "NORMAL"},
        "scale": scale,
        "results": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(payload, indent=2) + "\n")
    console.print(f"wrote {RESULTS.relative_to(Path.cwd()) if RESULTS.is_relative_to(Path.cwd()) else RESULTS}")


if __name__ == "__main__":
    main()
