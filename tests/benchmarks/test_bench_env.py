"""Every benchmark's load record says how fast the machine ran Python at the start and the end of the run, which
the load average cannot show (a virtual machine's cores slowed by a busy host); side-by-side runs take turns going
first."""

from __future__ import annotations

import time

from tests.benchmarks.loading import load_benchmark


def test_the_load_record_holds_a_speed_probe_from_both_ends_of_the_run() -> None:
    bench_env = load_benchmark("bench_env")
    with bench_env.LoadMonitor(interval_s=0.05) as monitor:
        time.sleep(0.1)
    load = monitor.summary()
    probes = load["speed_probe_ms"]
    assert len(probes) == 2 and all(0 < ms < 10_000 for ms in probes)
    assert "speed probe" in bench_env.describe(load) and "lower is faster" in bench_env.describe(load)
    assert bench_env.environment(load)["load_average"]["speed_probe_ms"] == probes


def test_load_records_without_a_probe_still_describe() -> None:
    """Records written before the probe existed (and a probe of one repeat) are still read and described."""
    bench_env = load_benchmark("bench_env")
    assert bench_env.speed_probe_ms(repeats=1) > 0
    line = bench_env.describe({"min": 0.1, "mean": 0.2, "max": 0.3, "cpus": 2})
    assert line.endswith("2 cores") and "speed probe" not in line


def test_alternate_runs_give_each_version_every_round_and_each_goes_first_in_turn() -> None:
    bench_env = load_benchmark("bench_env")
    order: list[str] = []

    def run(version: str) -> str:
        order.append(version)
        return f"{version} run {order.count(version)}"

    runs = bench_env.run_alternately({"current": "current", "baseline": "baseline"}, 3, run)
    assert runs == {
        "current": ["current run 1", "current run 2", "current run 3"],
        "baseline": ["baseline run 1", "baseline run 2", "baseline run 3"],
    }
    assert order == ["current", "baseline", "baseline", "current", "current", "baseline"]
