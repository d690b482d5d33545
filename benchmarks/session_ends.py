"""Ending trajectories opened in earlier batches, as a session's end arrives after its start: the store's wall time
per end on PostgreSQL (its server works in its own processes) and CPU per end on SQLite (in process), for this
tree beside another (`--baseline-src DIR`, DIR holding its `src/`) in the same run, each on a fresh database,
in interleaved rounds that alternate which version goes first (the best of each is kept).

`--stale-statistics` analyzes the tables while they are still empty, as a fresh PostgreSQL database is until
autovacuum analyzes it again: the planner then takes them for empty.

    .venv/bin/python benchmarks/session_ends.py [--trajectories 4096] [--batch 256] [--rounds 2]
        [--baseline-src DIR] [--stale-statistics] [--no-postgres]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from rich.console import Console
from rich.table import Table

from bench_env import LoadMonitor, describe, in_round_order, tree_env, write_results
from store_ingest import PostgresDatabases

RESULTS = Path(__file__).parent / "results" / "session_ends.json"


def run_worker(url: str, trajectories: int, batch: int, stale_statistics: bool) -> dict[str, Any]:
    from evolvable.protocol.models import TrajectoryEnded, TrajectoryHeader, TrajectoryStarted, TrajectoryStatus
    from evolvable.store import Store

    with Store.open(url) as store:
        if stale_statistics and url.startswith("postgresql"):
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE trajectories")
        ids = [f"traj_{i:08d}" for i in range(trajectories)]
        for start in range(0, trajectories, 1000):
            store.apply_events(
                [
                    TrajectoryStarted(trajectory_id=tid, header=TrajectoryHeader(id=tid, agent="support"))
                    for tid in ids[start : start + 1000]
                ]
            )
        ends = [
            TrajectoryEnded(trajectory_id=tid, status=TrajectoryStatus.completed, metadata={"end_reason": "client"})
            for tid in ids
        ]
        wall, cpu = time.perf_counter(), time.process_time()
        for start in range(0, trajectories, batch):
            store.apply_events(ends[start : start + batch])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        with store.engine.connect() as conn:
            ended = conn.exec_driver_sql("SELECT count(*) FROM trajectories WHERE status = 'completed'").scalar_one()
    return {"wall_us_per_end": wall / trajectories * 1e6, "cpu_us_per_end": cpu / trajectories * 1e6, "ended": ended}


def spawn(url: str, src: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    env = tree_env(src)
    command = [sys.executable, __file__, "--worker", "--url", url, "--trajectories", str(args.trajectories)]
    command += ["--batch", str(args.batch), *(["--stale-statistics"] if args.stale_statistics else [])]
    return json.loads(subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline-src", type=Path)
    parser.add_argument("--stale-statistics", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--postgres", help="Admin URL of the PostgreSQL server (default: the tests' database).")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_worker(args.url, args.trajectories, args.batch, args.stale_statistics)))
        return
    from evolvable.settings import get_settings

    admin_url = args.postgres or get_settings().test_postgres_url
    versions = {"current": None, **({"baseline": args.baseline_src} if args.baseline_src else {})}
    backends = ["sqlite", *([] if args.no_postgres else ["postgresql"])]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {b: {v: [] for v in versions} for b in backends}
    with LoadMonitor() as monitor, tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for backend in backends:
                for version, src in in_round_order(versions, round_):
                    databases = PostgresDatabases(admin_url) if backend == "postgresql" else None
                    try:
                        url = databases.create() if databases else f"sqlite:///{tmp}/ends-{version}-{round_}.db"
                        runs[backend][version].append(spawn(url, src, args))
                    finally:
                        if databases:
                            databases.drop_all()
    load = monitor.summary()
    best = {
        b: {v: {k: min(r[k] for r in runs[b][v]) for k in ("wall_us_per_end", "cpu_us_per_end")} for v in versions}
        for b in backends
    }
    stored = {b: {v: min(r["ended"] for r in runs[b][v]) for v in versions} for b in backends}
    table = Table(title=f"Ending {args.trajectories} trajectories in batches of {args.batch} (best of {args.rounds})")
    for column in ("backend", "measure", *versions, *(["ratio"] if "baseline" in versions else [])):
        table.add_column(column)
    for backend in backends:
        key = "wall_us_per_end" if backend == "postgresql" else "cpu_us_per_end"
        cells = [f"{best[backend][v][key]:.1f}" for v in versions]
        figures = best[backend]
        ratio = [f"x{figures['baseline'][key] / figures['current'][key]:.2f} less"] if len(cells) > 1 else []
        table.add_row(backend, key.replace("_us_per_end", " us per end"), *cells, *ratio)
    console = Console()
    console.print(table)
    console.print(f"every trajectory ended: {all(n == args.trajectories for s in stored.values() for n in s.values())}")
    console.print(describe(load))
    recorded = {k: str(v) for k, v in vars(args).items() if k not in ("results", "baseline_src", "postgres")}
    recorded["baseline"] = "given" if args.baseline_src else "none"  # (a path of the machine it ran on: left out)
    write_results(args.results, "session_ends", load, args=recorded, best=best, stored=stored)


if __name__ == "__main__":
    main()
