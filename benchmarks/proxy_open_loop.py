"""Latency the proxy adds at a fixed offered load: an open loop, beside the closed loops of `proxy_overhead.py`.

A closed loop at concurrency c keeps c requests in flight, so its latency is c over the throughput (Little's law):
once the cores are saturated it measures capacity, not what a call costs in time. Agents in front of a real model
arrive at some rate whatever the proxy does, so here every target is offered the same requests per second
(`--rates`), each request sent at its scheduled time and timed from that time, not from when it could be sent
(so a stall delays every request scheduled behind it, as it would a real agent's: no coordinated omission).

Targets, in interleaved rounds on the same mock upstream: the upstream directly, the bare aiohttp pass-through of
`proxy_overhead.py`, and `evolvable serve` with capture on (plus `--baseline-src DIR`, another tree's `src/`).
Per cell: p50/p95/p99 from the scheduled time, "added" over direct, the ratio of Evolvable's added p99 to the
pass-through's, the target's CPU per request (Evolvable's writer included), and the host's steal. There is no
target verdict here; it says what a rate below saturation costs.

    .venv/bin/python benchmarks/proxy_open_loop.py [--rates 250,500,1000] [--duration 5] [--rounds 2] [--stream]

Writes benchmarks/results/proxy_open_loop.json (`--results PATH` for another file) and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from evolvable.policy_server.launcher import free_port

sys.path.insert(0, str(Path(__file__).parent))
from bench_env import LoadMonitor, describe, serve_command, write_results
from proxy_overhead import EVOLVABLE, REQUEST, Servers, measured_cell, pct, source_env

RESULTS = Path(__file__).parent / "results" / "proxy_open_loop.json"
BASELINE = "evolvable baseline"
MAX_OUTSTANDING = 512
"""Requests in flight at most; past it the next waits (and its wait counts in its latency)."""


async def open_loop(
    send: Callable[[], Awaitable[bool]], rate: float, warmup: int, measured: int
) -> tuple[list[float], int, float]:
    """Send `warmup + measured` requests at `rate` per second through `send` (True when it succeeded), each at its
    scheduled time or as soon after it as the loop can; returns the measured ones' latencies in ms from their
    scheduled times, their errors, and the seconds from the first measured one's scheduled time to the last
    reply. (The loop's timers can wake a little early: a request sent before its time is timed from its send.)"""
    latencies: list[float] = []
    errors = 0
    slots = asyncio.Semaphore(MAX_OUTSTANDING)
    start = time.perf_counter() + 0.01
    last_done = start

    async def one(begin: float, timed: bool) -> None:
        nonlocal errors, last_done
        try:
            ok = await send()
        finally:
            slots.release()
        done = time.perf_counter()
        last_done = max(last_done, done)
        if timed:
            if ok:
                latencies.append((done - begin) * 1000)
            else:
                errors += 1

    tasks: list[asyncio.Task[None]] = []
    for i in range(warmup + measured):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await slots.acquire()
        begin = min(scheduled, time.perf_counter())  # (the scheduled time, unless the timer woke early)
        tasks.append(asyncio.create_task(one(begin, i >= warmup)))
    await asyncio.gather(*tasks)
    return latencies, errors, max(last_done - (start + warmup / rate), 1e-9)


def run_load(url: str, rate: float, duration_s: float, warmup_s: float, stream: bool, out_path: str) -> None:
    """The load generator's process: an open loop against `url`, raw figures to `out_path`."""
    import aiohttp
    import uvloop

    body = json.dumps({**REQUEST, "stream": stream}).encode()
    headers = {"Content-Type": "application/json"}

    async def main() -> dict[str, Any]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=MAX_OUTSTANDING)) as session:

            async def send() -> bool:
                try:
                    async with session.post(url, data=body, headers=headers) as reply:
                        async for _chunk in reply.content.iter_any():
                            pass
                        return reply.status == 200
                except aiohttp.ClientError:
                    return False

            latencies, errors, elapsed = await open_loop(
                send, rate, int(warmup_s * rate), max(1, int(duration_s * rate))
            )
        return {"latency_ms": latencies, "errors": errors, "elapsed_s": elapsed}

    Path(out_path).write_text(json.dumps(uvloop.run(main())))


def measure(url: str, rate: float, duration_s: float, stream: bool) -> dict[str, Any]:
    """One open-loop run in a fresh load-generator process."""
    command = [sys.executable, __file__, "load", "--url", url, "--rate", str(rate), "--duration", str(duration_s)]
    command += ["--stream"] if stream else []
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([*command, "--out", out.name], capture_output=True, timeout=duration_s * 20 + 60, check=True)
        figures: dict[str, Any] = json.loads(Path(out.name).read_text())
        return figures


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell over its rounds: percentiles from the scheduled times, achieved rate, CPU per request, steal."""
    latencies = [x for run in runs for x in run["latency_ms"]]
    requests = sum(len(run["latency_ms"]) + run["errors"] for run in runs)
    summary: dict[str, Any] = {
        "n": len(latencies),
        "errors": sum(run["errors"] for run in runs),
        "achieved_rps": len(latencies) / sum(run["elapsed_s"] for run in runs),
        **{f"p{q}": pct(latencies, q) for q in (50, 95, 99)},
        "steal_ms_per_s": 1000 * sum(run["steal_s"] for run in runs) / sum(run["wall_s"] for run in runs),
    }
    cpu = [run["cpu_s"] for run in runs if run.get("cpu_s") is not None]
    if cpu and requests:
        summary["cpu_ms_per_request"] = 1000 * sum(cpu) / requests
    return summary


def add_added(cells: list[dict[str, Any]]) -> None:
    """Each cell's latency over the upstream's own at the same rate, and Evolvable's added p99 over the bare
    pass-through's."""
    by = {(c["target"], c["rate"], c["stream"]): c for c in cells}
    for cell in cells:
        direct = by[("direct", cell["rate"], cell["stream"])]
        for q in (50, 95, 99):
            cell[f"added_p{q}"] = cell[f"p{q}"] - direct[f"p{q}"]
    for cell in cells:
        bare = by[("bare pass-through", cell["rate"], cell["stream"])]
        if cell["target"].startswith("evolvable") and bare["added_p99"] > 0:
            cell["added_p99_over_bare"] = cell["added_p99"] / bare["added_p99"]


def orchestrate(
    rates: list[float], duration_s: float, rounds: int, stream: bool, baseline_src: Path | None
) -> list[dict[str, Any]]:
    from rich.progress import Progress

    workdir = Path(tempfile.mkdtemp(prefix="evolvable-open-loop-"))
    servers = Servers(workdir)
    overhead = str(Path(__file__).parent / "proxy_overhead.py")
    try:
        mock_port = free_port()
        mock = f"http://127.0.0.1:{mock_port}/v1"
        mock_script = str(Path(__file__).parent / "mock_upstream.py")
        servers.start([sys.executable, mock_script, "--port", str(mock_port)], f"{mock}/models", log="mock")
        targets: dict[str, tuple[str, int | None, int | None]] = {"direct": (f"{mock}/chat/completions", None, None)}
        bare_port = free_port()
        bare = servers.start(
            [sys.executable, overhead, "bare", "--port", str(bare_port), "--upstream", mock],
            f"http://127.0.0.1:{bare_port}/v1/models",
            log="bare",
        )
        targets["bare pass-through"] = (f"http://127.0.0.1:{bare_port}/v1/chat/completions", bare.pid, None)
        for name, tag, src in ((EVOLVABLE, "evolvable", None), (BASELINE, "baseline", baseline_src)):
            if name == BASELINE and src is None:
                continue
            port = free_port()
            proc = servers.start(
                serve_command(mock, port, workdir / f"{tag}.db", workdir / f"spool-{tag}"),
                f"http://127.0.0.1:{port}/v1/proxy/status",
                env=source_env(src),
                log=tag,
            )
            targets[name] = (f"http://127.0.0.1:{port}/v1/chat/completions", proc.pid, port)
        runs: dict[tuple[str, float], list[dict[str, Any]]] = {(t, r): [] for t in targets for r in rates}
        with Progress() as progress:
            task = progress.add_task("measuring", total=len(rates) * rounds)
            for rate in rates:
                for round_ in range(rounds):
                    progress.update(task, description=f"{rate:g}/s round {round_ + 1}")
                    order = list(targets) if round_ % 2 == 0 else list(reversed(targets))
                    for name in order:
                        url, pid, port = targets[name]
                        load = functools.partial(measure, url, rate, duration_s / rounds, stream)
                        runs[(name, rate)].append(measured_cell(load, pid, port))
                    progress.advance(task)
    finally:
        servers.stop_all()
    cells = [
        {"target": name, "rate": rate, "stream": stream, **summarize(cell_runs)}
        for (name, rate), cell_runs in runs.items()
    ]
    add_added(cells)
    return cells


def print_table(cells: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Open loop: latency from each request's scheduled time (ms; added = target - direct)")
    columns = ("target", "rate/s", "achieved", "p50", "p99", "+p50", "+p95", "+p99", "+p99 / bare", "CPU ms/req")
    for column in (*columns, "steal ms/s"):
        table.add_column(column, justify="left" if column == "target" else "right")
    for c in sorted(cells, key=lambda c: (c["rate"], c["target"])):
        ratio = c.get("added_p99_over_bare")
        cpu = c.get("cpu_ms_per_request")
        table.add_row(
            c["target"],
            f"{c['rate']:g}",
            f"{c['achieved_rps']:.0f}",
            f"{c['p50']:.2f}",
            f"{c['p99']:.2f}",
            f"{c['added_p50']:+.2f}",
            f"{c['added_p95']:+.2f}",
            f"{c['added_p99']:+.2f}",
            f"{ratio:.2f}" if ratio is not None else "",
            f"{cpu:.3f}" if cpu is not None else "",
            f"{c['steal_ms_per_s']:.0f}",
        )
    Console(width=160).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="role")
    load = sub.add_parser("load", help=argparse.SUPPRESS)
    load.add_argument("--url", required=True)
    load.add_argument("--rate", type=float, required=True)
    load.add_argument("--duration", type=float, required=True)
    load.add_argument("--warmup", type=float, default=0.3)
    load.add_argument("--stream", action="store_true")
    load.add_argument("--out", required=True)
    parser.add_argument("--rates", default="250,500,1000", help="Requests per second offered, one cell each.")
    parser.add_argument("--duration", type=float, default=5.0, help="Seconds measured per cell (over its rounds).")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stream", action="store_true", help="Streamed replies instead of whole ones.")
    parser.add_argument("--baseline-src", type=Path, help="Another tree's src/, measured in the same rounds.")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.role == "load":
        run_load(args.url, args.rate, args.duration, args.warmup, args.stream, args.out)
        return
    try:
        rates = [float(r) for r in args.rates.split(",")]
    except ValueError:
        raise SystemExit(f"error: --rates takes numbers separated by commas, not {args.rates!r}") from None
    if not rates or min(rates) <= 0:
        raise SystemExit("error: --rates must be positive")
    with LoadMonitor() as monitor:
        cells = orchestrate(rates, args.duration, args.rounds, args.stream, args.baseline_src)
    load_summary = monitor.summary()
    print_table(cells)
    print(describe(load_summary))
    write_results(args.results, "proxy_open_loop", load_summary, duration_s_per_cell=args.duration, cells=cells)


if __name__ == "__main__":
    main()
