"""`benchmarks/proxy_overhead.py` gives no target verdict for cells too short to hold a few of the capture
writer's wake-ups: such cells measure calls while the writer sleeps and leave its work to the drain after them."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from tests.benchmarks.loading import load_benchmark

from evolvable.proxy.config import ProxyConfig


def _benchmark() -> ModuleType:
    return load_benchmark("proxy_overhead")


def test_cells_shorter_than_a_few_writer_wake_ups_get_no_verdict() -> None:
    bench = _benchmark()
    shortest = bench.WRITER_WAKES_PER_CELL * ProxyConfig().writer_idle_s
    assert bench.transient_cells(shortest) is None
    assert bench.transient_cells(3.0 / 3) is None  # the default: --duration 3, --rounds 3
    reason = bench.transient_cells(shortest * 0.6)
    assert reason is not None and "writer_idle_s" in reason and "--duration" in reason


def test_the_writer_sleep_an_evolvable_config_sets_is_the_one_judged(tmp_path: Path) -> None:
    """A run with `--evolvable-config` that lengthens the writer's sleep needs longer cells than the default."""
    bench = _benchmark()
    config = tmp_path / "evolvable.yaml"
    config.write_text("proxy:\n  writer_idle_s: 2.0\n")
    default_enough = bench.WRITER_WAKES_PER_CELL * ProxyConfig().writer_idle_s
    assert bench.transient_cells(default_enough) is None
    reason = bench.transient_cells(default_enough, config)
    assert reason is not None and "writer_idle_s 2.0" in reason
    assert bench.transient_cells(bench.WRITER_WAKES_PER_CELL * 2.0, config) is None


def test_a_cell_the_hypervisor_took_cpu_time_from_blocks_the_verdict() -> None:
    """Steal comes in bursts: one cell can lose a tenth of its CPU time while the run as a whole looks quiet."""
    bench = _benchmark()
    runs = [
        {"ttlb": [1.0, 2.0], "ttfb": [1.0, 2.0], "errors": 0, "elapsed_s": 5.0, "overhead_header": [],
         "steal_s": 0.4, "wall_s": 5.0},
        {"ttlb": [1.0], "ttfb": [1.0], "errors": 0, "elapsed_s": 5.0, "overhead_header": [],
         "steal_s": 0.6, "wall_s": 5.0},
    ]  # fmt: skip
    cell = {"target": "bare pass-through", "concurrency": 1, "stream": False, **bench.summarize(runs)}
    assert cell["steal_ms_per_s"] == 100.0  # both cores together: 5% of two cores' time
    quiet = {**cell, "steal_ms_per_s": bench.MAX_STEAL_SHARE * 2 * 1000 * 0.9, "stream": True}
    assert bench.stolen_cells([quiet], cpus=2) is None
    reason = bench.stolen_cells([quiet, cell], cpus=2)
    assert reason is not None and "bare pass-through c=1 (5.0%)" in reason and "stream" not in reason


def test_the_printed_report_gives_the_recorded_reason_for_withholding_the_verdict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A verdict withheld for stolen or short cells (not the load as a whole) is said in the report, not only in
    the JSON."""
    bench = _benchmark()
    load = {"min": 0.2, "mean": 0.5, "max": 0.9, "cpus": 2, "other_jobs_runnable_mean": 0.1}
    load["other_jobs_runnable_max"] = 1
    reason = "no target verdict: the hypervisor took more than 3% of the CPU time in bare pass-through c=1 (7.2%)"
    results = {"cells": [], "checks": {"added_p99_c1_over_bare": 1.2}, "load_average": load, "verdict": reason}
    bench.print_table(results)
    printed = capsys.readouterr().out
    assert "bare pass-through c=1 (7.2%)" in printed and "added_p99_c1_over_bare: 1.200" in printed
