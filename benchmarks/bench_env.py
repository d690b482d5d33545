"""What a benchmark needs to say about the machine it ran on: load average during the run, the
environment (python, packages, CPU count), and whether a target verdict means anything.

A target verdict measured while other jobs kept more tasks runnable than there are cores says more
about those jobs than about the code, so `verdict_blocked` returns the reason instead and scripts
print it in place of met / not met.

The load average does not show a virtual machine whose cores run slower for a while (a busy host): the same
code then takes two or three times the CPU, with the load unchanged. `LoadMonitor` therefore also times a
fixed Python workload at the start and the end of the run (`speed_probe_ms`, lower is faster): figures of two
runs are comparable in absolute terms only where their probes agree.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

PACKAGES = (
    "evolvable",
    "sqlalchemy",
    "psycopg",
    "psycopg-binary",
    "pydantic",
    "pydantic-core",
    "orjson",
    "msgspec",
    "aiohttp",
    "uvloop",
    "fastapi",
    "uvicorn",
    "torch",
    "transformers",
)


MAX_STEAL_SHARE = 0.03
"""The most hypervisor steal (a share of all CPU time) under which a run counts as quiet: an idle virtual machine
here shows about 1% idle, and benchmark cells on a contended host lost up to 25%."""


class LoadMonitor:
    """Samples the machine's load while a benchmark runs: the 1-minute load average, and how many tasks
    outside the benchmark's own process tree were running or runnable (the load other jobs cause).

    The second figure gates verdicts: a benchmark that saturates the cores on purpose (a closed-loop
    load test) raises the load average by itself, which says nothing about interference.
    """

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.load_samples: list[float] = []
        self.other_samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="load-monitor", daemon=True)
        self.speed_probe_ms: list[float] = []
        self._steal_from: dict[int, float] = {}
        self._started = self._steal = self._elapsed = 0.0

    def __enter__(self) -> LoadMonitor:
        self.speed_probe_ms.append(speed_probe_ms())
        self._steal_from, self._started = steal_seconds(), time.monotonic()
        self._take()
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._take()
        self._steal = sum(steal_seconds().values()) - sum(self._steal_from.values())
        self._elapsed = time.monotonic() - self._started
        self.speed_probe_ms.append(speed_probe_ms())

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def _take(self) -> None:
        self.load_samples.append(os.getloadavg()[0])
        others = runnable_outside(os.getpid())
        if others is not None:
            self.other_samples.append(others)

    def summary(self) -> dict[str, Any]:
        """Load average (1 min) over the run, and other jobs' runnable tasks (mean, max)."""
        others = self.other_samples
        return {
            "min": min(self.load_samples),
            "mean": sum(self.load_samples) / len(self.load_samples),
            "max": max(self.load_samples),
            "other_jobs_runnable_mean": sum(others) / len(others) if others else None,
            "other_jobs_runnable_max": max(others) if others else None,
            "samples": len(self.load_samples),
            "cpus": os.cpu_count(),
            "speed_probe_ms": self.speed_probe_ms or None,
            "steal_share": self._steal / (self._elapsed * len(self._steal_from))
            if self._elapsed and self._steal_from
            else None,
        }


def steal_seconds() -> dict[int, float]:
    """Per CPU, the time its virtual CPU was runnable but the hypervisor ran something else (/proc/stat's
    `steal`; empty off Linux): latency no scheduling inside this machine can remove."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    steal: dict[int, float] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/stat").read_text().splitlines():
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu" and len(fields) > 7:
                steal[int(name[3:])] = int(fields[7]) / ticks
    return steal


def speed_probe_ms(repeats: int = 5) -> float:
    """CPU milliseconds of a fixed pure-Python workload (dict, string and integer operations, as the capture path
    does), the best of `repeats`: how fast this machine runs Python right now, whatever its load average says."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        counts: dict[str, int] = {}
        total = 0
        for i in range(100_000):
            key = f"k{i & 1023}"
            counts[key] = counts.get(key, 0) + i
            total += len(key)
        best = min(best, (time.process_time() - started) * 1000)
    return best


def tree_env(src: Path | None, **extra: str) -> dict[str, str]:
    """This process's environment plus `extra`, with the source tree `src` (a directory holding `src/`) first on
    PYTHONPATH when given: how side-by-side scripts run another version of evolvable in a worker process."""
    env = dict(os.environ, **extra)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src / "src"), env.get("PYTHONPATH")) if p)
    return env


def in_round_order(versions: dict[str, T], round_: int) -> list[tuple[str, T]]:
    """The versions of a side-by-side run in the order round `round_` runs them: each goes first in every other
    round, because the first run of a round can be the slower one (docs/PERFORMANCE.md, session 12), which a
    fixed order would book to one side."""
    return list(versions.items())[:: -1 if round_ % 2 else 1]


def run_alternately(versions: dict[str, T], rounds: int, run: Callable[[T], R]) -> dict[str, list[R]]:
    """`run` of each version once per round, in `in_round_order`: each version's results, round by round."""
    runs: dict[str, list[R]] = {name: [] for name in versions}
    for round_ in range(rounds):
        for name, version in in_round_order(versions, round_):
            runs[name].append(run(version))
    return runs


def runnable_outside(root_pid: int) -> int | None:
    """Tasks in state R (running or runnable) not descending from `root_pid`; None where /proc is missing."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    parents: dict[int, int] = {}
    running: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        state, ppid = stat[stat.rindex(")") + 2 :].split(" ", 2)[:2]
        parents[int(entry.name)] = int(ppid)
        if state == "R":
            running.append(int(entry.name))
    return sum(1 for pid in running if not _descends(pid, root_pid, parents))


def _descends(pid: int, root: int, parents: dict[int, int]) -> bool:
    while pid > 1:
        if pid == root:
            return True
        pid = parents.get(pid, 0)
    return pid == root


def describe(load: dict[str, Any]) -> str:
    """One line for the report."""
    others = load.get("other_jobs_runnable_mean")
    line = f"load average (1 min) during the run {load['min']:.2f}-{load['max']:.2f} (mean {load['mean']:.2f})"
    if others is not None:
        line += f"; other jobs' runnable tasks mean {others:.1f}, max {load['other_jobs_runnable_max']}"
    probe = load.get("speed_probe_ms")
    if probe:
        line += f"; speed probe {' -> '.join(f'{ms:.0f}' for ms in probe)} ms (lower is faster)"
    if load.get("steal_share") is not None:
        line += f"; hypervisor steal {load['steal_share']:.1%} of CPU time"
    return line + f"; {load['cpus']} cores"


def verdict_blocked(load: dict[str, Any]) -> str | None:
    """Why no target verdict should be printed for a run under this load, or None if it may be.

    Blocked when other jobs kept more tasks runnable than there are cores, on average; where that
    cannot be observed, when the load average itself exceeded the core count. Blocked too when the hypervisor
    took more than `MAX_STEAL_SHARE` of the CPU time: the machine was not quiet, whatever ran inside it.
    """
    cpus = load["cpus"] or 1
    others = load.get("other_jobs_runnable_mean")
    busy, what = (others, "other jobs kept") if others is not None else (load["max"], "the load average reached")
    if busy > cpus:
        return (
            f"no target verdict: {what} {busy:.1f} tasks runnable on {cpus} cores during the run "
            f"(load average {load['min']:.1f}-{load['max']:.1f}); rerun on a quieter machine"
        )
    steal = load.get("steal_share")
    if steal is not None and steal > MAX_STEAL_SHARE:
        return (
            f"no target verdict: the hypervisor took {steal:.1%} of the CPU time during the run (steal; at most "
            f"{MAX_STEAL_SHARE:.0%} for a verdict); rerun when the host is quieter"
        )
    return None


def environment(load: dict[str, Any] | None = None) -> dict[str, Any]:
    """Python, platform, CPU count, installed versions of the packages that matter, and the run's load."""
    packages: dict[str, str] = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "packages": packages,
        "load_average": load,
    }


def write_side_by_side(
    out: Path, args: argparse.Namespace, body: dict[str, Any], started: float, load_start: tuple[float, ...]
) -> dict[str, Any]:
    """Write a side-by-side run's JSON (its arguments, `body`, wall time, the load average at both ends) and say
    where, with the load: the figures are ratios within the run, and the load says how much they can be read."""
    payload = {
        "args": {k: str(v) for k, v in vars(args).items() if k != "out"},
        **body,
        "wall_s": time.perf_counter() - started,
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2))
    print(f"load average {load_start[0]:.1f} -> {os.getloadavg()[0]:.1f}; {payload['wall_s']:.0f} s; wrote {out.name}")
    return payload


def serve_command(upstream: str, port: int, db: Path, spool: Path, config: Path | None = None) -> list[str]:
    """`evolvable serve` of this venv in front of `upstream`, on SQLite at `db`, the way the benchmarks run it."""
    command = [str(Path(sys.executable).parent / "evolvable"), "serve", "--upstream", upstream, "--port", str(port)]
    command += ["--db", f"sqlite:///{db}", "--spool-dir", str(spool)]
    return command + (["--config", str(config)] if config else [])


def write_results(out: Path, benchmark: str, load: Any, **fields: Any) -> None:
    """A run's JSON: the benchmark, when (UTC), the machine and its load during the run, then `fields`."""
    payload = {
        "benchmark": benchmark,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "environment": environment(load),
        **fields,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
