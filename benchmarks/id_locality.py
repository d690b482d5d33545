"""What time-ordered ids save the store: the capture writer's store stage for session calls, with session ids
made as `new_id` made them before (uuid4, random) against as it makes them now (time-ordered, UUID version 7
layout), as the table grows, in the same run.

Each session is one trajectory: a start, eight calls (llm_call steps, as `Converter` makes them from spooled
records) and an end, with 64 sessions live at a time and their calls interleaved, in batches of 256 events as
the writer applies them. `--calls-per-session 1` gives one-call trajectories, the shape of those the SDK makes
with its own ids (`Trajectory()`). (A proxy call without a session gets a trajectory id made of the proxy's
request-id counter, already in order, so the one-call figures of `proxy_overhead.py` do not move.)

Random keys scatter each batch over the whole of every index keyed by the trajectory id (trajectories, the event
ledger, steps), so each insert touches another page and the commit writes more of them, the more so the more
rows the table holds; time-ordered keys land at the right-hand edge.

SQLite runs in this process, so its work is in the process CPU time reported; PostgreSQL's server does its part
in its own processes, so for it the wall time per call counts. Each (backend, ids) pair runs in its own process
on a fresh database, in interleaved rounds; the best round is kept.

    .venv/bin/python benchmarks/id_locality.py [--calls 80000] [--calls-per-session 8] [--rounds 2]
        [--postgres URL | --no-postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_env import LoadMonitor, describe, write_results
from capture_cpu import MESSAGES, reply_bytes
from evolvable.settings import get_settings
from store_ingest import PostgresDatabases

RESULTS = Path(__file__).parent / "results" / "id_locality.json"
BATCH = 256
LIVE_SESSIONS = 64
IDS = ("uuid4", "new_id")


def session_id(kind: str) -> str:
    if kind == "uuid4":
        return f"traj_{uuid.uuid4().hex}"
    from evolvable.proxy.sessions import new_session_id

    return new_session_id()


def call_record(tid: str, i: int, reply: bytes) -> bytes:
    """One spooled session call, as the request path frames it."""
    import msgspec

    from evolvable.proxy.records import CallRecord, encode

    call = CallRecord(
        id=f"req_{i}",
        request_id=f"req_{i}",
        trajectory_id=tid,
        tenant_id="default",
        session_id=tid,
        agent="support",
        request={"model": "mock", "messages": MESSAGES, "temperature": 0.2},
        injected=[],
        upstream="mock",
        started=time.time(),
    )
    call.reply = msgspec.Raw(reply)
    call.latency_ms = 12.5
    return encode(call)


def session_events(kind: str, calls: int, per_session: int) -> Iterator[tuple[Any, int]]:
    """(event, calls it stands for) for `calls` session calls, rounded up to whole waves of `LIVE_SESSIONS`
    sessions: each wave's starts, its calls round-robin over the live sessions, then its ends."""
    from evolvable.protocol.models import TrajectoryEnded, TrajectoryHeader, TrajectoryStarted, TrajectoryStatus
    from evolvable.proxy.capture import Converter
    from evolvable.proxy.records import decode

    converter = Converter()
    replies = [reply_bytes(i, 0, 0) for i in range(64)]
    made = 0
    while made < calls:
        wave = [session_id(kind) for _ in range(LIVE_SESSIONS)]
        for tid in wave:
            header = TrajectoryHeader(id=tid, agent="support")
            yield TrajectoryStarted(event_id=f"{tid}:start", trajectory_id=tid, header=header), 0
        for _ in range(per_session):
            for tid in wave:
                for event in converter.convert(decode(call_record(tid, made, replies[made % 64]))):
                    yield event, 1
                made += 1
        for tid in wave:
            ended = TrajectoryEnded(event_id=f"{tid}:end", trajectory_id=tid, status=TrajectoryStatus.completed)
            yield ended, 0


def run_worker(kind: str, calls: int, per_session: int, url: str | None) -> dict[str, Any]:
    """Store CPU and wall time per call, for each quarter of the calls, in batches of `BATCH` events, and how
    many calls the store holds at the end (every one: a benchmark that lost some would flatter itself)."""
    import sqlalchemy as sa

    from evolvable.store import Store
    from evolvable.store.tables.trajectories import steps

    quarters = [{"calls": 0, "cpu_s": 0.0, "wall_s": 0.0} for _ in range(4)]

    def apply(batch: list[Any], counted: int) -> None:
        quarter = quarters[min(3, 4 * (counted - 1) // calls)]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        store.apply_events(batch)
        quarter["cpu_s"] += time.process_time() - cpu0
        quarter["wall_s"] += time.perf_counter() - wall0
        quarter["calls"] += sum(1 for e in batch if e.type == "step_appended")

    with tempfile.TemporaryDirectory() as tmp, Store.open(url or f"sqlite:///{tmp}/ids.db") as store:
        batch: list[Any] = []
        counted = 0
        for event, n in session_events(kind, calls, per_session):
            batch.append(event)
            counted += n
            if len(batch) == BATCH:
                apply(batch, counted)
                batch = []
        if batch:
            apply(batch, counted)
        with store.engine.connect() as conn:
            stored = conn.execute(sa.select(sa.func.count()).select_from(steps)).scalar_one()
    return {
        "calls": sum(q["calls"] for q in quarters),
        "stored_calls": stored,
        "quarters": [
            {"cpu_us_per_call": q["cpu_s"] / q["calls"] * 1e6, "wall_us_per_call": q["wall_s"] / q["calls"] * 1e6}
            for q in quarters
        ],
    }


def spawn(kind: str, calls: int, per_session: int, url: str | None) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--worker",
        kind,
        "--calls",
        str(calls),
        "--calls-per-session",
        str(per_session),
    ]
    command += ["--url", url] if url else []
    out = subprocess.run(command, env=dict(os.environ), check=True, stdout=subprocess.PIPE).stdout
    return json.loads(out)


def best(runs: list[dict[str, Any]], quarter: int, key: str) -> float:
    return min(run["quarters"][quarter][key] for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=80_000, help="Session calls per run.")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--calls-per-session",
        type=int,
        default=8,
        help="1: one-call trajectories, the shape of trajectories the SDK makes with its own ids (Trajectory()).",
    )
    parser.add_argument(
        "--postgres", default=get_settings().test_postgres_url, help="An admin URL of a server to make databases on."
    )
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--worker", choices=IDS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        sys.stdout.write(json.dumps(run_worker(args.worker, args.calls, args.calls_per_session, args.url)))
        return
    backends = ["sqlite", *([] if args.no_postgres else ["postgresql"])]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {b: {kind: [] for kind in IDS} for b in backends}
    with LoadMonitor() as monitor:
        for round_ in range(args.rounds):
            for backend in backends:
                for kind in IDS if round_ % 2 == 0 else reversed(IDS):
                    databases = PostgresDatabases(args.postgres) if backend == "postgresql" else None
                    try:
                        url = databases.create() if databases is not None else None
                        runs[backend][kind].append(spawn(kind, args.calls, args.calls_per_session, url))
                    finally:
                        if databases is not None:
                            databases.drop_all()
    load = monitor.summary()
    table: dict[str, dict[str, Any]] = {}
    print(
        f"store stage, us per call (best of {args.rounds}), {args.calls:,} calls per run, "
        f"{args.calls_per_session} per session"
    )
    print(f"{'backend, quarter of the calls':34}{'measure':>10}{'uuid4':>10}{'new_id':>10}{'ratio':>8}")
    for backend in backends:
        for quarter in range(4):
            for key, label in (("cpu_us_per_call", "CPU"), ("wall_us_per_call", "wall")):
                random, ordered = (best(runs[backend][kind], quarter, key) for kind in IDS)
                name = f"{backend}, quarter {quarter + 1}"
                table.setdefault(name, {})[label] = {"uuid4": random, "new_id": ordered, "ratio": random / ordered}
                print(f"{name:34}{label:>10}{random:>10.1f}{ordered:>10.1f}{random / ordered:>7.2f}x")
    print(describe(load))
    write_results(
        args.results,
        "id_locality",
        load,
        calls=args.calls,
        calls_per_session=args.calls_per_session,
        rounds=args.rounds,
        table=table,
        runs=runs,
    )


if __name__ == "__main__":
    main()
