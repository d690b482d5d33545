"""Garbage-collector pauses of every Python process a benchmark starts (the proxy included).

Put this directory first on PYTHONPATH and set GC_PROBE_OUT to a path prefix; each process then
writes `<prefix>.<pid>.json` at exit: per generation, the collections made after the process froze
its heap (`gc.freeze()`, i.e. while serving), their wall and CPU time, and for the first 40 how many
objects the collected generation held and what it freed. Used for the c=1 tail (docs/PERFORMANCE.md):

    GC_PROBE_OUT=/tmp/gc PYTHONPATH=benchmarks/gc_probe:src .venv/bin/python benchmarks/proxy_overhead.py \\
        --skip-litellm --concurrency 1 --rounds 1
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import sys
import time
from typing import Any

OUT = os.environ.get("GC_PROBE_OUT")
SAMPLES = 40

_pauses: list[tuple[int, float, float]] = []
_samples: list[list[Any]] = []
_start: dict[str, Any] = {}


def _callback(phase: str, info: dict[str, Any]) -> None:
    serving = gc.get_freeze_count() > 0
    if phase == "start":
        if serving and len(_samples) < SAMPLES:
            with _detached():
                objects = gc.get_objects(info["generation"])
                _start["ids"] = {id(o): type(o).__name__ for o in objects}
                _samples.append([info["generation"], len(objects)])
                del objects
        _start["wall"], _start["cpu"] = time.perf_counter(), time.thread_time()
        return
    if not serving or "wall" not in _start:
        return
    wall, cpu = time.perf_counter() - _start["wall"], time.thread_time() - _start["cpu"]
    _pauses.append((info["generation"], wall, cpu))
    ids = _start.pop("ids", None)
    if ids is not None:
        with _detached():
            alive = {id(o) for g in range(info["generation"], 3) for o in gc.get_objects(g)}
            freed: dict[str, int] = {}
            for object_id, kind in ids.items():
                if object_id not in alive:
                    freed[kind] = freed.get(kind, 0) + 1
            top = sorted(freed.items(), key=lambda kv: -kv[1])[:8]
            _samples[-1] += [info.get("collected"), round(cpu * 1000, 2), top]


class _detached:
    """The probe's own allocations must not re-enter it."""

    def __enter__(self) -> None:
        gc.callbacks.remove(_callback)

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.insert(0, _callback)


def _dump() -> None:
    by_generation: dict[str, dict[str, float]] = {}
    for generation, wall, cpu in _pauses:
        entry = by_generation.setdefault(
            str(generation), {"n": 0, "wall_max_ms": 0.0, "cpu_max_ms": 0.0, "cpu_ms": 0.0}
        )
        entry["n"] += 1
        entry["wall_max_ms"] = max(entry["wall_max_ms"], wall * 1000)
        entry["cpu_max_ms"] = max(entry["cpu_max_ms"], cpu * 1000)
        entry["cpu_ms"] += cpu * 1000
    report = {"argv": sys.argv[:4], "threshold": gc.get_threshold(), "serving": by_generation, "samples": _samples}
    with open(f"{OUT}.{os.getpid()}.json", "w") as f:
        json.dump(report, f)


def _on_sigterm(signum: int, frame: object) -> None:
    """uvicorn re-raises the SIGTERM it caught once it has shut down; its default action skips atexit."""
    _dump()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


if OUT:
    gc.callbacks.append(_callback)
    atexit.register(_dump)
    signal.signal(signal.SIGTERM, _on_sigterm)
