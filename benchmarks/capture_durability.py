"""What answering only after the capture record is in the spool file costs (issue 15), side by side in
one run: direct to the mock upstream, Evolvable with `reply_after_spooled: false` (answer, then spool)
and Evolvable with `reply_after_spooled: true` (the default: spool, then answer; survives kill -9).

Same harness as benchmarks/proxy_overhead.py (its load generator, servers and percentiles), interleaved
rounds so machine noise hits every target alike; prints the same table and the load over the run
(benchmarks/bench_env.py).

    .venv/bin/python benchmarks/capture_durability.py [--duration 3] [--concurrency 1,16]

Writes benchmarks/results/capture_durability.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_env import LoadMonitor, environment, serve_command
from evolvable.policy_server.launcher import free_port
from proxy_overhead import (
    ROOT,
    Servers,
    add_added_latency,
    cpu_seconds,
    measure_raw,
    print_table,
    summarize,
    wait_capture_drained,
)

RESULTS = ROOT / "benchmarks" / "results" / "capture_durability.json"
VARIANTS = {"evolvable (answer, then spool)": False, "evolvable (spool, then answer)": True}


def _start_evolvable(servers: Servers, workdir: Path, mock: str, name: str, durable: bool) -> tuple[str, int, int]:
    port = free_port()
    slug = "durable" if durable else "queued"
    config = workdir / f"{slug}.yaml"
    config.write_text(f"reply_after_spooled: {str(durable).lower()}\n")
    proc = servers.start(
        serve_command(mock, port, workdir / f"{slug}.db", workdir / f"spool-{slug}", config),
        f"http://127.0.0.1:{port}/v1/proxy/status",
        log=slug,
    )
    return f"http://127.0.0.1:{port}/v1/chat/completions", port, proc.pid


def run(duration_s: float, concurrencies: list[int], rounds: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="evolvable-durability-"))
    servers = Servers(workdir)
    results: dict[str, Any] = {
        "duration_s_per_cell": duration_s,
        "rounds": rounds,
        "cells": [],
    }
    try:
        mock_port = free_port()
        mock = f"http://127.0.0.1:{mock_port}/v1"
        servers.start(
            [sys.executable, str(ROOT / "benchmarks" / "mock_upstream.py"), "--port", str(mock_port)],
            f"{mock}/models",
            log="mock",
        )
        targets: list[tuple[str, str, int | None, int | None]] = [("direct", f"{mock}/chat/completions", None, None)]
        for name, durable in VARIANTS.items():
            targets.append((name, *_start_evolvable(servers, workdir, mock, name, durable)))
        for stream in (False, True):
            for c in concurrencies:
                runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in targets}
                for _round in range(rounds):
                    for name, url, port, pid in targets:
                        cpu0 = cpu_seconds(pid) if pid else 0.0
                        measured = measure_raw(url, c, stream, duration_s / rounds, None)
                        if port is not None:
                            measured["capture_drain_s"] = wait_capture_drained(port)
                        measured["cpu_s"] = (cpu_seconds(pid) - cpu0) if pid else None
                        runs[name].append(measured)
                for name, *_ in targets:
                    results["cells"].append(
                        {"target": name, "concurrency": c, "stream": stream, **summarize(runs[name])}
                    )
    finally:
        servers.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    add_added_latency(results)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=3.0, help="Seconds measured per cell.")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with LoadMonitor() as monitor:
        results = run(args.duration, [int(c) for c in args.concurrency.split(",")], args.rounds)
    results["load_average"] = monitor.summary()
    results["environment"] = environment(results["load_average"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print_table(results, title="Capture durability")


if __name__ == "__main__":
    main()
