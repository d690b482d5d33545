"""What the Prometheus instrumentation costs the proxy, side by side in one run.

- per request: a minimal ASGI app called directly vs through `proxy.metrics.observed` (the wrapper every
  proxy request passes: one counter, two histograms, the overhead header parsed), plus
  `observe_capture` on a call record (two histograms). Rounds alternate A/B so drift hits both alike;
- per scrape: building the proxy's `/metrics` text with a realistic number of series.

    .venv/bin/python benchmarks/metrics_overhead.py [--calls 20000] [--rounds 5]

Prints a table and writes benchmarks/results/metrics_overhead.json (with the machine's load average:
figures taken while load exceeds the core count are marked as such).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from evolvable.proxy.metrics import observe_capture, observed
from evolvable.proxy.records import CallRecord
from evolvable.telemetry import metrics

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import LoadMonitor, describe, environment, verdict_blocked

RESULTS = Path(__file__).resolve().parent / "results" / "metrics_overhead.json"
START = {"type": "http.response.start", "status": 200, "headers": [(b"x-evolvable-overhead-ms", b"0.412")]}
BODY = {"type": "http.response.body", "body": b"{}"}
RECORD = CallRecord(request_id="req_1", trajectory_id="traj_1", upstream="vllm", latency_ms=12.5, ttft_ms=3.1)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send(START)
    await send(BODY)


async def sink(message: Any) -> None:
    return None


async def per_call_us(calls: int, wrapped: bool) -> float:
    scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "evolvable.upstream": "vllm"}
    started = time.perf_counter()
    for _ in range(calls):
        if wrapped:
            await observed(app, scope, None, sink)
            observe_capture(RECORD)
        else:
            await app(scope, None, sink)
    return (time.perf_counter() - started) / calls * 1e6


def scrape_ms(repeats: int = 20) -> tuple[float, int]:
    for route in range(40):  # ~40 routes x statuses x upstreams, as a busy proxy accumulates
        for status in ("200", "400", "401", "502"):
            metrics.PROXY_REQUESTS.labels(f"/v1/route{route}", "api", status, "vllm").inc()
            metrics.PROXY_LATENCY.labels(f"/v1/route{route}", "api").observe(0.01)
    started = time.perf_counter()
    for _ in range(repeats):
        text = metrics.exposition([metrics.PROXY_REGISTRY], writer=True)
    return (time.perf_counter() - started) / repeats * 1000, text.count(b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with LoadMonitor() as monitor:
        direct, instrumented = [], []
        for _ in range(args.rounds):
            direct.append(asyncio.run(per_call_us(args.calls, wrapped=False)))
            instrumented.append(asyncio.run(per_call_us(args.calls, wrapped=True)))
        scrape, lines = scrape_ms()
    load = monitor.summary()
    result = {
        "calls_per_round": args.calls,
        "rounds": args.rounds,
        "direct_us_median": round(statistics.median(direct), 2),
        "instrumented_us_median": round(statistics.median(instrumented), 2),
        "added_us_median": round(statistics.median(i - d for i, d in zip(instrumented, direct, strict=True)), 2),
        "scrape_ms": round(scrape, 2),
        "scrape_lines": lines,
        "load_average": load,
        "environment": environment(load),
    }
    print(f"{'path':<34}{'per request (µs, median of rounds)':>36}")
    print(f"{'ASGI app called directly':<34}{result['direct_us_median']:>36}")
    print(f"{'through observed() + capture':<34}{result['instrumented_us_median']:>36}")
    print(f"{'added by the instrumentation':<34}{result['added_us_median']:>36}")
    print(f"/metrics text: {result['scrape_ms']} ms for {lines} lines")
    blocked = verdict_blocked(load)
    print(describe(load) + (" (figures are upper bounds: " + blocked + ")" if blocked else ""))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
