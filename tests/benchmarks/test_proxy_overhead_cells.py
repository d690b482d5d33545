"""`benchmarks/proxy_overhead.py` gives no target verdict for cells too short to hold a few of the capture
writer's wake-ups: such cells measure calls while the writer sleeps and leave its work to the drain after them.
It also pauses the writer on request, and says where the cores went in each cell."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from rich.console import Console
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


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_paused_writer_is_stopped_while_the_load_runs_and_resumed_before_the_drain() -> None:
    """`--writer-paused`: the target's child processes (Evolvable's capture writer) make no progress during the
    cell's load, and run again afterwards, so the writer still applies every call."""
    bench = _benchmark()
    spinner = "import os, time\nif os.fork() == 0:\n    while True: pass\ntime.sleep(60)\n"
    parent = subprocess.Popen([sys.executable, "-c", spinner])
    try:
        deadline = time.monotonic() + 10
        while not bench.descendant_pids(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        (child,) = bench.descendant_pids(parent.pid)
        seen: dict[str, object] = {}

        def load() -> dict[str, object]:
            before = bench.cpu_seconds(child, descendants=False)
            time.sleep(0.3)
            seen["state"], seen["cpu_s"] = _state(child), bench.cpu_seconds(child, descendants=False) - before
            return {"ttlb": [1.0], "ttfb": [1.0], "errors": 0, "elapsed_s": 0.3, "overhead_header": []}

        run = bench.measured_cell(load, parent.pid, None, pause_writer=True)
        assert seen["state"] == "T" and seen["cpu_s"] == 0.0
        assert _state(child) != "T"
        assert run["machine_busy_s"] >= 0 and run["machine_idle_s"] >= 0

        bench.measured_cell(load, parent.pid, None)  # not paused: the child spins through the load
        assert seen["state"] != "T" and isinstance(seen["cpu_s"], float) and seen["cpu_s"] > 0.05
    finally:
        for pid in bench.descendant_pids(parent.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_the_summary_says_how_busy_the_machine_and_the_load_generator_were() -> None:
    bench = _benchmark()
    run = {"ttlb": [1.0] * 100, "ttfb": [1.0] * 100, "errors": 0, "elapsed_s": 1.0, "overhead_header": [],
           "steal_s": 0.0, "wall_s": 1.0, "cpu_s": 0.05, "own_cpu_s": 0.03, "machine_busy_s": 1.5,
           "machine_idle_s": 0.5, "load_generator_cpu_s": 0.02}  # fmt: skip
    cell = {"target": "evolvable (capture on)", "concurrency": 16, "stream": False, **bench.summarize([run, run])}
    assert cell["load_generator_cpu_ms_per_request"] == pytest.approx(0.2)
    assert cell["machine_idle_share"] == pytest.approx(0.25)
    console = Console(record=True, width=200)
    console.print(bench.cores_table([cell]))
    row = next(line for line in console.export_text().splitlines() if "evolvable" in line)
    assert [part.strip() for part in row.split("│")[4:8]] == ["0.300", "0.200", "0.200", "25.0%"]
