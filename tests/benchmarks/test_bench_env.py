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


def test_the_load_record_says_how_much_cpu_time_the_hypervisor_took() -> None:
    bench_env = load_benchmark("bench_env")
    before = bench_env.steal_seconds()
    assert before and set(before) <= set(range(64)) and all(s >= 0 for s in before.values())
    with bench_env.LoadMonitor(interval_s=0.05) as monitor:
        time.sleep(0.1)
    load = monitor.summary()
    assert 0 <= load["steal_share"] <= 1
    assert all(bench_env.steal_seconds()[cpu] >= stolen for cpu, stolen in before.items())
    assert "hypervisor steal" in bench_env.describe(load)


def test_a_run_the_hypervisor_took_cpu_time_from_gets_no_verdict() -> None:
    bench_env = load_benchmark("bench_env")
    quiet = {"min": 0.1, "mean": 0.2, "max": 0.3, "cpus": 2, "other_jobs_runnable_mean": 0.1}
    assert bench_env.verdict_blocked({**quiet, "steal_share": bench_env.MAX_STEAL_SHARE / 2}) is None
    assert bench_env.verdict_blocked(quiet) is None  # (records from before steal was measured)
    blocked = bench_env.verdict_blocked({**quiet, "steal_share": 0.12})
    assert blocked is not None and "12.0%" in blocked and "hypervisor" in blocked
    busy = {**quiet, "other_jobs_runnable_mean": 3.0, "steal_share": 0.0}
    assert "tasks runnable" in (bench_env.verdict_blocked(busy) or "")
