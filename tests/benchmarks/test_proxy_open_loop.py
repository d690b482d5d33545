"""`benchmarks/proxy_open_loop.py`: requests go out at their scheduled times and are timed from them, so a target
that falls behind shows it in every request queued behind (no coordinated omission); cells are compared as the
table says; and the load generator measures a real upstream."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import pytest
from tests.benchmarks.loading import BENCHMARKS, load_benchmark

from evolvable.policy_server.launcher import free_port


def test_latency_counts_from_the_scheduled_time_when_the_target_falls_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_benchmark("proxy_open_loop")
    monkeypatch.setattr(bench, "MAX_OUTSTANDING", 1)  # the loop itself must wait for each reply
    calls = 0

    async def slow_send() -> bool:  # 20 ms per request, while 200/s are offered (one every 5 ms)
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.02)
        return calls % 10 != 0  # every tenth fails

    latencies, errors, elapsed = asyncio.run(bench.open_loop(slow_send, rate=200, warmup=2, measured=20))
    assert calls == 22 and errors == 2 and len(latencies) == 18
    # timed from when each could be sent, every one would read about 20 ms; from its scheduled time the
    # queue shows: the last is about 20 + 21 x 15 ms late
    assert min(latencies) >= 19
    assert max(latencies) > 250
    assert latencies == sorted(latencies)
    assert elapsed >= 0.3


def test_a_target_that_keeps_up_is_timed_by_its_own_latency() -> None:
    bench = load_benchmark("proxy_open_loop")

    async def quick_send() -> bool:
        await asyncio.sleep(0.001)
        return True

    latencies, errors, _elapsed = asyncio.run(bench.open_loop(quick_send, rate=200, warmup=0, measured=40))
    assert errors == 0 and len(latencies) == 40
    assert bench.pct(latencies, 50) < 10  # about 1 ms each, plus the loop's timer granularity


def test_a_request_sent_before_its_scheduled_time_is_timed_from_its_send(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_benchmark("proxy_open_loop")

    async def wakes_at_once(_delay: float) -> None:  # a timer that fires early, here always at once
        return None

    monkeypatch.setattr(bench.asyncio, "sleep", wakes_at_once)

    async def one_ms_send() -> bool:
        began = time.perf_counter()
        while time.perf_counter() - began < 0.001:
            pass
        return True

    latencies, _errors, _elapsed = asyncio.run(bench.open_loop(one_ms_send, rate=10, warmup=0, measured=20))
    # all 20 went out at once, though scheduled over two seconds: each is timed from its send, not from a time
    # still ahead of it (which would read up to -1.9 s)
    assert len(latencies) == 20 and all(0.9 < x < 200 for x in latencies)


def _cell(target: str, p50: float, p99: float) -> dict[str, Any]:
    return {
        "target": target,
        "rate": 500.0,
        "stream": False,
        "achieved_rps": 499.0,
        "p50": p50,
        "p95": p99,
        "p99": p99,
        "steal_ms_per_s": 12.0,
    }


def test_added_latency_is_over_direct_and_evolvable_is_compared_with_the_pass_through(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_benchmark("proxy_open_loop")
    cells = [
        _cell("direct", 1.0, 2.0),
        _cell("bare pass-through", 1.5, 3.0),
        _cell(bench.EVOLVABLE, 1.8, 4.5),
        _cell(bench.BASELINE, 1.7, 3.5),
    ]
    bench.add_added(cells)
    by = {c["target"]: c for c in cells}
    assert by["direct"]["added_p99"] == 0 and "added_p99_over_bare" not in by["bare pass-through"]
    assert by[bench.EVOLVABLE]["added_p50"] == pytest.approx(0.8)
    assert by[bench.EVOLVABLE]["added_p99_over_bare"] == pytest.approx(2.5)
    assert by[bench.BASELINE]["added_p99_over_bare"] == pytest.approx(1.5)
    bench.print_table(cells)
    printed = capsys.readouterr().out
    assert "2.50" in printed and "1.50" in printed and "+2.50" in printed  # the ratios and Evolvable's added p99


def test_the_load_generator_measures_the_mock_upstream_at_the_rate_asked() -> None:
    bench = load_benchmark("proxy_open_loop")
    port = free_port()
    mock = subprocess.Popen([sys.executable, str(BENCHMARKS / "mock_upstream.py"), "--port", str(port)])
    try:
        load_benchmark("proxy_overhead").wait_ready(f"http://127.0.0.1:{port}/v1/models", mock)
        for stream in (False, True):
            figures = bench.measure(f"http://127.0.0.1:{port}/v1/chat/completions", 100, 1.0, stream)
            assert figures["errors"] == 0
            assert len(figures["latency_ms"]) == 100  # one second at 100/s
            assert 0.9 <= figures["elapsed_s"] < 3
            assert all(0 < x < 1000 for x in figures["latency_ms"])
    finally:
        mock.terminate()
        mock.wait(10)
