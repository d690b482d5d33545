"""CPU per call of Evolvable's own work on the serving thread: the ASGI app exactly as `evolvable serve` builds
it (governance, control plane, metrics, capture spool), driven in process with the chat request and the
upstream reply of `proxy_overhead.py`, canned: no socket, server protocol or upstream client is measured,
only what Evolvable adds to a pass-through. Thread CPU time (`time.thread_time`): the spool's and writer's
threads and the forked writer are not counted.

`--baseline-src DIR` runs an earlier version (DIR holds its `src/`) in its own processes, alternating with
this one round by round, so both see the same machine:

    .venv/bin/python benchmarks/hot_path_cpu.py [--calls 4000] [--rounds 4] [--concurrency 16] [--baseline-src DIR]

Prints a table (minimum and median over rounds, us per call; read the minimum: interference only adds) and
writes benchmarks/results/hot_path_cpu.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_env import LoadMonitor, describe, run_alternately, tree_env, write_results
from mock_upstream import COMPLETION as REPLY
from proxy_overhead import REQUEST

RESULTS = Path(__file__).parent / "results" / "hot_path_cpu.json"


class _Body:
    """The part of aiohttp's response stream the hot path reads."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def iter_any(self) -> Any:
        yield self.data


class CannedReply:
    """What `UpstreamClient.post` returns, with the reply already in."""

    status = 200
    content_type = "application/json"

    def __init__(self, data: bytes) -> None:
        self.content, self.content_length = _Body(data), len(data)

    def release(self) -> None:
        return None


def scope_of(body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8400),
    }


async def measure(calls: int, rounds: int, concurrency: int) -> list[float]:
    """Thread CPU per call in each round, after a warm-up, with `concurrency` calls in flight."""
    import orjson

    from evolvable.app import EvolvableConfig, build_stack
    from evolvable.cli.serve import apply_overrides

    body, reply = orjson.dumps(REQUEST), REPLY  # what proxy_overhead.py sends and its mock upstream answers

    async def upstream_post(*_args: Any, **_kwargs: Any) -> CannedReply:
        await asyncio.sleep(0)  # a real upstream answers on a later turn of the loop
        return CannedReply(reply)

    with tempfile.TemporaryDirectory() as tmp:
        config = EvolvableConfig()
        apply_overrides(
            config, upstream="http://127.0.0.1:9/v1", spool_dir=Path(tmp) / "spool", db=f"sqlite:///{tmp}/e.db"
        )
        with build_stack(config) as stack:
            app = stack.app
            assert app is not None
            async with app.router.lifespan_context(app):
                runtime = app.state.proxy
                runtime.upstream.post = upstream_post
                statuses: list[int] = []

                async def call() -> None:
                    messages = [{"type": "http.request", "body": body, "more_body": False}]

                    async def receive() -> dict[str, Any]:
                        return messages.pop() if messages else {"type": "http.disconnect"}

                    async def send(message: dict[str, Any]) -> None:
                        if message["type"] == "http.response.start":
                            statuses.append(message["status"])

                    await app(scope_of(body), receive, send)

                async def client(n: int) -> None:
                    for _ in range(n):
                        await call()

                await client(300)  # imports, caches, first series
                if set(statuses) != {200}:
                    raise SystemExit(f"the hot path did not answer 200: {sorted(set(statuses))}")
                figures = []
                for _ in range(rounds):
                    cpu = time.thread_time()
                    await asyncio.gather(*(client(calls // concurrency) for _ in range(concurrency)))
                    figures.append((time.thread_time() - cpu) / (calls // concurrency * concurrency) * 1e6)
                    await runtime.flush(60)  # the writer catches up between rounds, not during them
                if set(statuses) != {200}:
                    raise SystemExit(f"the hot path did not answer 200: {sorted(set(statuses))}")
                if not await runtime.flush(60):
                    raise SystemExit("the writer did not store the calls within 60 s")
        with sqlite3.connect(Path(tmp) / "e.db") as db:
            stored = db.execute("select count(*) from trajectories").fetchone()[0]
        if stored != len(statuses):  # every answered call is a one-call trajectory
            raise SystemExit(f"{len(statuses)} calls answered, {stored} stored")
        return figures


ROUNDS_PER_PROCESS = 3


def spawn(src: Path | None, calls: int, concurrency: int) -> list[float]:
    """`ROUNDS_PER_PROCESS` rounds of one version in a fresh process."""
    env = tree_env(src, HF_HUB_OFFLINE="1")
    command = [sys.executable, __file__, "--worker", "--calls", str(calls), "--rounds", str(ROUNDS_PER_PROCESS)]
    command += ["--concurrency", str(concurrency)]
    out = subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE).stdout
    return list(json.loads(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=4000, help="Calls per round.")
    parser.add_argument(
        "--rounds", type=int, default=4, help=f"Processes per version, {ROUNDS_PER_PROCESS} rounds each."
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--baseline-src", type=Path, help="An earlier version's tree (holding src/), run alternately.")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        import uvloop

        print(json.dumps(uvloop.run(measure(args.calls, args.rounds, args.concurrency))))
        return
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    versions: dict[str, Path | None] = {"current": None}
    if args.baseline_src is not None:
        versions["baseline"] = args.baseline_src
    with LoadMonitor() as monitor, Progress(console=Console(stderr=True)) as progress:
        task = progress.add_task("rounds", total=args.rounds * len(versions))

        def one_process(src: Path | None) -> list[float]:
            figures = spawn(src, args.calls, args.concurrency)
            progress.advance(task)
            return figures

        # each version goes first in every other round: drift in the machine's speed hits both alike
        by_process = run_alternately(versions, args.rounds, one_process)
    runs = {name: [us for figures in processes for us in figures] for name, processes in by_process.items()}
    load = monitor.summary()
    summary = {name: {"min_us": min(v), "median_us": statistics.median(v), "rounds_us": v} for name, v in runs.items()}
    table = Table(title=f"Evolvable's CPU per call on the serving thread, c={args.concurrency}")
    table.add_column("version")
    table.add_column("min us/call", justify="right")
    table.add_column("median us/call", justify="right")
    for name, figures in summary.items():
        table.add_row(name, f"{figures['min_us']:.1f}", f"{figures['median_us']:.1f}")
    if "baseline" in summary:  # the minimum: what a call costs when nothing else interferes (noise only adds)
        base, cur = summary["baseline"], summary["current"]
        ratios = (base["min_us"] / cur["min_us"], base["median_us"] / cur["median_us"])
        table.add_row("baseline / current", f"{ratios[0]:.2f}x", f"{ratios[1]:.2f}x")
    Console().print(table)
    print(describe(load))
    write_results(
        args.out, "hot_path_cpu", load, calls=args.calls, concurrency=args.concurrency, rounds=args.rounds, **summary
    )


if __name__ == "__main__":
    main()
