"""What each piece of Evolvable's request path costs in place: CPU per call of the serving process of `evolvable
serve`, as it is and with one piece taken out (`serving_ablation/sitecustomize.py`), beside the same pass-through
on Evolvable's server stack (`proxy_overhead.py`'s ASGI floor: uvicorn, httptools, uvloop, pooled aiohttp).

`hot_path_cpu.py` times Evolvable's own work in a tight loop, where the caches stay warm; in a served proxy the
same code runs between the kernel's network work, the upstream's and the client's, and costs more. This measures
it there. The serving process is pinned to one core, and the mock upstream, the load generator and Evolvable's
capture writer to the other, so the figure is the serving process's own (Linux only; root not needed).

Each round starts every target fresh, in an order that alternates between rounds, warms it for two seconds, then
runs a closed loop at each concurrency for `--duration` seconds. Read the medians over rounds; this machine's speed
drifts by 10-20% between runs. Beside the serving process's CPU and latency, each cell records the writer's CPU per
call, how long the mock upstream (on the writer's core) waited runnable for it, and each core's hypervisor steal:
a cell that lost a tenth of its CPU time to the host is slow for every target.

    .venv/bin/python benchmarks/serving_ablation.py [--rounds 3] [--duration 5] [--concurrency 1,16]

Prints a table and writes benchmarks/results/serving_ablation.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evolvable.policy_server.launcher import free_port

sys.path.insert(0, str(Path(__file__).parent))
from bench_env import LoadMonitor, describe, in_round_order, serve_command, steal_seconds, write_results
from proxy_overhead import Servers, cpu_seconds, descendant_pids, measure_raw, pct, runqueue_seconds

RESULTS = Path(__file__).parent / "results" / "serving_ablation.json"
PROBE = Path(__file__).parent / "serving_ablation"
FLOOR = "asgi floor"
EVOLVABLE = "evolvable"
ABLATIONS = ("capture", "spool-write", "metrics", "read-deadline", "writer", "store", "wal-checkpoint", "writer-group")
"""The targets run by default (`--ablate` also takes the probe's experiments, e.g. `writer-spin`, `writer-slice`)."""
CHANGES = {"writer-group", "writer-spin", "writer-slice", "writer-yield", "writer-sched-idle"}
"""Probe pieces that change something rather than take it out."""
SERVING_CORE, OTHER_CORE = 0, 1
FIGURES = (
    "cpu_us_per_call",
    "p50_ms",
    "p99_ms",
    "writer_cpu_us_per_call",
    "upstream_wait_us_per_call",
    "serving_core_steal_ms_per_s",
    "other_core_steal_ms_per_s",
)


def _targets(pieces: list[str]) -> dict[str, str | None]:
    """Each target's name and what the probe does to it: None for the floor, "" for Evolvable as it is."""
    named = {f"{EVOLVABLE} {'with' if p in CHANGES else 'without'} {p}": p for p in pieces}
    return {FLOOR: None, EVOLVABLE: "", **named}


def _start(servers: Servers, ablate: str | None, mock: str, workdir: Path) -> tuple[Any, str]:
    """One target on the serving core (`ablate`: see `_targets`); its descendants (Evolvable's writer) moved to the
    other core."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    pin = ["taskset", "-c", str(SERVING_CORE)]
    if ablate is None:
        command = [sys.executable, str(Path(__file__).parent / "proxy_overhead.py"), "asgi", "--port", str(port)]
        proc = servers.start([*pin, *command, "--upstream", mock], f"{url}/models", log="floor")
    else:
        path = os.pathsep.join(filter(None, [str(PROBE), os.environ.get("PYTHONPATH")]))
        env = {"EVOLVABLE_ABLATE": ablate, "PYTHONPATH": path}
        tag = ablate or "whole"
        command = serve_command(mock, port, workdir / f"{tag}.db", workdir / f"spool-{tag}")
        proc = servers.start([*pin, *command], f"{url}/proxy/status", env=env, log=f"evolvable-{tag}")
        for child in descendant_pids(proc.pid):
            os.sched_setaffinity(child, {OTHER_CORE})
    return proc, f"{url}/chat/completions"


def _counters(serving_pid: int, upstream_pid: int) -> tuple[float, float, float, float, float]:
    """CPU seconds of the serving process and of its descendants (the writer); the seconds the mock upstream on
    the other core has waited runnable for a core (how long the writer kept it waiting); and each core's
    hypervisor steal (its virtual CPU runnable, the host running something else)."""
    serving = cpu_seconds(serving_pid, descendants=False)
    steal = steal_seconds()
    return (
        serving,
        cpu_seconds(serving_pid) - serving,
        runqueue_seconds(upstream_pid),
        steal.get(SERVING_CORE, 0.0),
        steal.get(OTHER_CORE, 0.0),
    )


def run_round(
    targets: list[tuple[str, str | None]], concurrencies: list[int], duration: float, workdir: Path
) -> dict[str, Any]:
    """Each target started in turn: its serving process's CPU per call and latency at each concurrency."""
    out: dict[str, Any] = {}
    servers = Servers(workdir)
    try:
        mock_port = free_port()
        mock = f"http://127.0.0.1:{mock_port}/v1"
        upstream = servers.start(
            [sys.executable, str(Path(__file__).parent / "mock_upstream.py"), "--port", str(mock_port)],
            f"{mock}/models", log="mock",
        )  # fmt: skip
        for target, ablate in targets:
            proc, url = _start(servers, ablate, mock, workdir)
            measure_raw(url, max(concurrencies), False, 2.0, None)  # warm-up
            for concurrency in concurrencies:
                before, started = _counters(proc.pid, upstream.pid), time.monotonic()
                raw = measure_raw(url, concurrency, False, duration, None)
                wall = time.monotonic() - started
                spent, writer_spent, upstream_waited, serving_stolen, other_stolen = (
                    after - then for after, then in zip(_counters(proc.pid, upstream.pid), before, strict=True)
                )
                calls = len(raw["ttlb"])
                if raw["errors"] or not calls:
                    raise SystemExit(f"{target} at c={concurrency}: {raw['errors']} errors, {calls} calls")
                out.setdefault(target, {})[str(concurrency)] = {
                    "cpu_us_per_call": spent / calls * 1e6,
                    "writer_cpu_us_per_call": writer_spent / calls * 1e6,
                    "upstream_wait_us_per_call": upstream_waited / calls * 1e6,
                    "serving_core_steal_ms_per_s": serving_stolen / wall * 1e3,
                    "other_core_steal_ms_per_s": other_stolen / wall * 1e3,
                    "p50_ms": pct(raw["ttlb"], 50),  # (the load generator reports milliseconds)
                    "p99_ms": pct(raw["ttlb"], 99),
                    "calls": calls,
                }
            servers.stop(proc)
    finally:
        servers.stop_all()
    return out


def summarize(rounds: list[dict[str, Any]], targets: list[str], concurrencies: list[int]) -> dict[str, Any]:
    """Per concurrency and target: medians over rounds, and the difference from the floor and the whole proxy."""
    summary: dict[str, Any] = {}
    for concurrency in map(str, concurrencies):
        cells = {}
        for target in targets:
            figures = [r[target][concurrency] for r in rounds]
            cells[target] = {key: statistics.median(f[key] for f in figures) for key in FIGURES}
            cells[target]["cpu_us_rounds"] = [round(f["cpu_us_per_call"], 1) for f in figures]
        floor, whole = cells[FLOOR]["cpu_us_per_call"], cells[EVOLVABLE]["cpu_us_per_call"]
        for cell in cells.values():
            cell["over_floor_us"] = cell["cpu_us_per_call"] - floor
            cell["saved_us"] = whole - cell["cpu_us_per_call"]
        summary[concurrency] = cells
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="Seconds measured per cell.")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--ablate", default=",".join(ABLATIONS), help="Probe pieces, one target each.")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two cores: one for the serving process, one for everything else")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    targets = _targets([p for p in args.ablate.split(",") if p])
    os.sched_setaffinity(0, {OTHER_CORE})  # the mock upstream and the load generators inherit it
    rounds = []
    with LoadMonitor() as monitor, tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            rounds.append(run_round(in_round_order(targets, round_), concurrencies, args.duration, Path(tmp)))
    load = monitor.summary()
    summary = summarize(rounds, list(targets), concurrencies)
    for concurrency, cells in summary.items():
        print(f"\nserving process CPU per call, c={concurrency} (median of {args.rounds} rounds; pinned to one core)")
        print(
            f"{'target':34}{'us/call':>9}{'over floor':>12}{'saved':>8}{'p50 ms':>8}{'p99 ms':>8}"
            f"{'writer us':>10}{'upstream wait us':>18}{'steal ms/s':>12}  rounds"
        )
        for target, cell in cells.items():
            print(
                f"{target:34}{cell['cpu_us_per_call']:>9.1f}{cell['over_floor_us']:>12.1f}{cell['saved_us']:>8.1f}"
                f"{cell['p50_ms']:>8.2f}{cell['p99_ms']:>8.2f}{cell['writer_cpu_us_per_call']:>10.1f}"
                f"{cell['upstream_wait_us_per_call']:>18.1f}"
                f"{cell['serving_core_steal_ms_per_s']:>6.1f}/{cell['other_core_steal_ms_per_s']:<5.1f}"
                f"  {cell['cpu_us_rounds']}"
            )
    print(describe(load))
    write_results(args.results, "serving_ablation", load, duration_s=args.duration, rounds=rounds, summary=summary)


if __name__ == "__main__":
    main()
