"""Store ingest throughput: ATDP step events per second into SQLite and PostgreSQL.

For each backend: `apply_events` in batches of 1, 100 and 1000 events (idempotency
ledger, placeholder handling and all), against the peer a hand-written logger would
be: one plain INSERT per step, one transaction each, no idempotency. Each run uses
fresh trajectories of 8 realistic steps (llm_call with tool calls and token ids,
tool_call results), a signal and an end event; steps/s counts step rows stored.
Also the read paths: `iter_trajectories` (training; trajectories/s), and the dashboard's
`list_trajectories` pages and `get_trajectory` by id.

Every (backend, version) runs in its own process and database. `--baseline-src DIR` measures an
earlier version of the code side by side in the same run (DIR holds its `src/`), so both see the same
machine. Besides wall figures, CPU figures (client CPU plus the PostgreSQL backends' CPU) hold up
better on a shared machine. The load is sampled during the run and stored with the environment; when
other jobs kept more tasks runnable than there are cores, no target verdict is printed.

    git archive fef3d4d src | tar -x -C DIR     # optional: the version to compare with
    .venv/bin/python benchmarks/store_ingest.py [--postgres URL] [--quick] [--baseline-src DIR --baseline-label fef3d4d]
        [--current-first]

Prints a Rich table and writes benchmarks/results/store_ingest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
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

sys.path.insert(0, str(Path(__file__).parent))
from bench_env import LoadMonitor, describe, environment, tree_env, verdict_blocked

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
    start, cpu, server = time.perf_counter(), time.process_time(), server_cpu(store)
    for i in range(0, len(events), batch_size):
        chunk = events[i : i + batch_size]
        store.apply_events(chunk)
        progress.advance(task, len(chunk))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    progress.remove_task(task)
    steps = sum(isinstance(e, StepAppended) for e in events)
    return _figures(len(events), steps, elapsed, cpu, _delta(server_cpu(store), server))


def _figures(events: int, steps: int, elapsed: float, cpu: float, server: float | None) -> dict[str, Any]:
    """Wall figures, and CPU figures that hold under load: client CPU, plus the PostgreSQL backends' CPU."""
    total_cpu = cpu + (server or 0.0)
    return {
        "events": events,
        "steps": steps,
        "seconds": elapsed,
        "client_cpu_seconds": cpu,
        "server_cpu_seconds": server,
        "steps_per_s": steps / elapsed,
        "steps_per_client_cpu_s": steps / max(cpu, 1e-9),
        "steps_per_cpu_s": steps / max(total_cpu, 1e-9),
    }


def server_cpu(store: Store) -> float | None:
    """CPU seconds used so far by this database's PostgreSQL backends (the server runs on this machine);
    None for SQLite (in-process: client CPU covers it) or where /proc cannot show them."""
    if store.engine.dialect.name != "postgresql":
        return None
    with store.engine.connect() as conn:
        pids = conn.scalars(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")).all()
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return total


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def measure_naive(store: Store, n_steps: int, progress: Progress, label: str) -> dict[str, Any]:
    """The peer: serialize each step and INSERT it in its own transaction, as a simple logger would
    (no idempotency, no validation; the trajectory rows are inserted beforehand, untimed)."""
    trajectories = [make_trajectory(10_000_000 + i) for i in range(max(1, n_steps // STEPS_PER_TRAJECTORY))]
    store.apply_events([e for t in trajectories for e in events_for(t.model_copy(update={"steps": [], "signals": []}))])
    pending = [(t.id, s) for t in trajectories for s in t.steps]
    task = progress.add_task(label, total=len(pending))
    start, cpu, server = time.perf_counter(), time.process_time(), server_cpu(store)
    for trajectory_id, step in pending:
        with store.engine.begin() as conn:
            conn.execute(sa.insert(steps_table), step_row(trajectory_id, step))
        progress.advance(task)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    progress.remove_task(task)
    return _figures(len(pending), len(pending), elapsed, cpu, _delta(server_cpu(store), server))


def measure_read(store: Store, progress: Progress, label: str) -> dict[str, Any]:
    """The training read path: every trajectory, whole, in keyset batches."""
    total = store.count(TrajectoryFilter())
    task = progress.add_task(label, total=total)
    start, cpu, server = time.perf_counter(), time.process_time(), server_cpu(store)
    n = 0
    for _ in store.iter_trajectories(TrajectoryFilter(), batch_size=200):
        n += 1
        progress.advance(task)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    server = _delta(server_cpu(store), server)
    progress.remove_task(task)
    return {
        "trajectories": n,
        "seconds": elapsed,
        "client_cpu_seconds": cpu,
        "server_cpu_seconds": server,
        "trajectories_per_s": n / elapsed,
        "trajectories_per_cpu_s": n / max(cpu + (server or 0.0), 1e-9),
    }


def measure_dashboard(store: Store, n: int = 400) -> dict[str, Any]:
    """The dashboard's read paths: pages of 50 headers (the list), then single trajectories by id (the detail)."""
    start = time.perf_counter()
    headers, cursor = store.list_trajectories(TrajectoryFilter(), limit=50)
    while cursor is not None and len(headers) < 2000:
        page, cursor = store.list_trajectories(TrajectoryFilter(), limit=50, cursor=cursor)
        headers += page
    list_s = time.perf_counter() - start
    ids = [h.id for h in random.Random(0).sample(headers, min(n, len(headers)))]
    start = time.perf_counter()
    for trajectory_id in ids:
        store.get_trajectory(trajectory_id)
    get_s = time.perf_counter() - start
    return {
        "list_headers_per_s": len(headers) / list_s,
        "get_trajectory_per_s": len(ids) / get_s,
        "headers": len(headers),
        "gets": len(ids),
    }


def run_backend(name: str, url: str, plan: dict[str, int], progress: Progress) -> dict[str, Any]:
    store = Store.open(url)
    try:
        out: dict[str, Any] = {"naive_1_row_per_tx": measure_naive(store, plan["naive"], progress, f"{name} naive")}
        for batch in (1, 100, 1000):
            out[f"apply_events_batch_{batch}"] = measure_apply(
                store, batch, plan[f"batch_{batch}"], progress, f"{name} batch {batch}"
            )
        out["read_iter_trajectories"] = measure_read(store, progress, f"{name} read")
        out["read_dashboard"] = measure_dashboard(store)
        return out
    finally:
        store.close()


# --------------------------------------------------------------------------- orchestration


def run_worker(backend: str, url: str, plan: dict[str, int]) -> None:
    """One backend's measurements in this process (whichever `evolvable` is importable); JSON to stdout."""
    # No progress display here: its refresh thread would count in the client CPU figures.
    with Progress(console=Console(stderr=True), transient=True, disable=True) as progress:
        result = run_backend(backend, url, plan, progress)
    sys.stdout.write(json.dumps(result))


def spawn_worker(backend: str, url: str, plan: dict[str, int], src: Path | None) -> dict[str, Any]:
    """Run a worker in a fresh process; `src` (a source tree) puts another version of evolvable first."""
    env = tree_env(src)
    command = [sys.executable, __file__, "--worker", backend, "--url", url, "--plan", json.dumps(plan)]
    done = subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE)
    return json.loads(done.stdout)


class PostgresDatabases:
    """Throw-away databases on the server behind an admin URL, one per worker run."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self.names: list[str] = []

    def settings(self) -> dict[str, Any]:
        with self.admin.connect() as conn:
            return {k: conn.exec_driver_sql(f"SHOW {k}").scalar() for k in PG_SETTINGS}

    def create(self) -> str:
        name = f"bench_store_{uuid.uuid4().hex[:10]}"
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        self.names.append(name)
        return self.admin_url.rsplit("/", 1)[0] + f"/{name}"

    def drop_all(self) -> None:
        with self.admin.connect() as conn:
            for name in self.names:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.admin.dispose()


PG_SETTINGS = ("server_version", "synchronous_commit", "fsync", "shared_buffers", "default_toast_compression")
VERSIONS = ("current", "baseline")


def measure_all(
    plan: dict[str, int], pg: PostgresDatabases, baseline: Path | None, tmp: Path, current_first: bool = False
) -> dict[str, Any]:
    """Per backend: the baseline version (if given), then the current one (`current_first`: the other way
    round), each in its own process and database."""
    results: dict[str, Any] = {}
    order = (("baseline", baseline), ("current", None))
    for backend in ("sqlite", "postgresql"):
        for version, src in reversed(order) if current_first else order:
            if version == "baseline" and baseline is None:
                continue
            url = f"sqlite:///{tmp / f'{version}.db'}" if backend == "sqlite" else pg.create()
            print(f"{backend}: {version} ...", file=sys.stderr, flush=True)
            results.setdefault(version, {})[backend] = spawn_worker(backend, url, plan, src)
    return results


# --------------------------------------------------------------------------- report

LABELS = {
    "naive_1_row_per_tx": "naive: 1 INSERT per tx",
    "apply_events_batch_1": "apply_events, 1 event/call",
    "apply_events_batch_100": "apply_events, 100 events/call",
    "apply_events_batch_1000": "apply_events, 1000 events/call",
}
INGEST_TARGET_STEPS_PER_S = 20_000
READ_TARGET_TRAJECTORIES_PER_S = 5_000


def print_report(console: Console, results: dict[str, Any], load: dict[str, Any]) -> dict[str, Any]:
    versions = [v for v in VERSIONS if v in results]
    table = Table(title="Store ingest: steps/s (8-step trajectories, ~1.2 kB JSON per step); reads: trajectories/s")
    table.add_column("method", no_wrap=True)
    for backend in ("sqlite", "postgresql"):
        short = {"sqlite": "SQLite", "postgresql": "PG"}[backend]
        for version in versions:
            table.add_column(f"{short} {version}", justify="right")
        if "baseline" in results:
            table.add_column(f"{short} ×", justify="right")
    rows: list[tuple[str, Any]] = [(label, (method, "steps_per_s")) for method, label in LABELS.items()]
    rows += [
        ("  per CPU-second (client + PG backend), 1000/call", ("apply_events_batch_1000", "steps_per_cpu_s")),
        ("read: iter_trajectories (training)", ("read_iter_trajectories", "trajectories_per_s")),
        ("  per CPU-second (client + PG backend)", ("read_iter_trajectories", "trajectories_per_cpu_s")),
        ("read: list_trajectories headers", ("read_dashboard", "list_headers_per_s")),
        ("read: get_trajectory by id", ("read_dashboard", "get_trajectory_per_s")),
    ]
    for label, (method, field) in rows:
        cells = [label]
        for backend in ("sqlite", "postgresql"):
            values = {v: results[v][backend].get(method, {}).get(field) for v in versions}
            cells += [f"{values[v]:,.0f}" if values[v] is not None else "-" for v in versions]
            if "baseline" in results:
                ratio = values["current"] / values["baseline"] if values.get("baseline") else None
                cells.append(f"{ratio:.2f}×" if ratio else "-")
        table.add_row(*cells)
    console.print(table)
    console.print(describe(load))
    return print_verdicts(console, results["current"], load)


def print_verdicts(console: Console, current: dict[str, Any], load: dict[str, Any]) -> dict[str, Any]:
    checks: dict[str, Any] = {}
    for backend in ("sqlite", "postgresql"):
        steps = current[backend]["apply_events_batch_1000"]["steps_per_s"]
        reads = current[backend]["read_iter_trajectories"]["trajectories_per_s"]
        checks[f"{backend}_ingest_steps_per_s"] = steps
        checks[f"{backend}_read_trajectories_per_s"] = reads
        checks[f"target_{backend}_ingest_ge_{INGEST_TARGET_STEPS_PER_S}"] = steps >= INGEST_TARGET_STEPS_PER_S
        checks[f"target_{backend}_read_ge_{READ_TARGET_TRAJECTORIES_PER_S}"] = reads >= READ_TARGET_TRAJECTORIES_PER_S
    blocked = verdict_blocked(load)
    if blocked is not None:
        console.print(blocked)
        return {"verdict": blocked, "figures": {k: v for k, v in checks.items() if not k.startswith("target_")}}
    for key, value in checks.items():
        if key.startswith("target_"):
            console.print(f"{key}: {'met' if value else 'NOT met'}")
    return {"verdict": "measured with load average at or below the core count", "checks": checks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=get_settings().test_postgres_url, help="admin URL of a PostgreSQL server")
    parser.add_argument("--quick", action="store_true", help="a tenth of the work (smoke run)")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="source tree of an earlier version (`git archive REV src | tar -x -C DIR`), measured in the same run",
    )
    parser.add_argument(
        "--baseline-label", default="baseline", help="what the baseline is (e.g. its commit), for the JSON"
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help=f"where to write the JSON (default {RESULTS.name})"
    )
    parser.add_argument(
        "--current-first",
        action="store_true",
        help="run the current version before the baseline on each backend (on PostgreSQL the second run was the "
        "slower in four runs of five, whichever version it was: run both orders to read a ratio)",
    )
    parser.add_argument("--worker", choices=("sqlite", "postgresql"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, args.url, json.loads(args.plan))
        return
    scale = 0.1 if args.quick else 1.0
    plan = {
        k: int(v * scale) for k, v in {"naive": 600, "batch_1": 320, "batch_100": 6400, "batch_1000": 16000}.items()
    }

    console = Console(width=max(Console().width, 150))
    pg = PostgresDatabases(args.postgres)
    try:
        pg_settings = pg.settings()
        with tempfile.TemporaryDirectory() as tmp, LoadMonitor() as monitor:
            results = measure_all(plan, pg, args.baseline_src, Path(tmp), args.current_first)
    finally:
        pg.drop_all()
    load = monitor.summary()
    checks = print_report(console, results, load)

    payload = {
        "benchmark": "store_ingest",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "environment": environment(load),
        "postgresql": pg_settings,
        "sqlite": {"journal_mode": "wal", "synchronous": "NORMAL"},
        "scale": scale,
        "baseline": args.baseline_label if args.baseline_src else None,
        "order": "current first" if args.current_first else "baseline first",
        "checks": checks,
        "results": results,
    }
    out = args.results.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    console.print(f"wrote {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")


if __name__ == "__main__":
    main()
