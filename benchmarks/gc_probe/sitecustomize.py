"""Garbage-collector pauses of every Python process a benchmark starts (the proxy included).

Put this directory first on PYTHONPATH and set GC_PROBE_OUT to a path prefix; each process then
writes `<prefix>.<pid>.json` at exit: per generation, the collections made after the process froze
its heap (`gc.freeze()`, i.e. while serving; in the proxy's writer process, all of them), their wall and
CPU time, and for the first 40 what the
collected generation held and what it freed. Used for the c=1 tail (docs/PERFORMANCE.md):

    GC_PROBE_OUT=/tmp/gc PYTHONPATH=benchmarks/gc_probe:src .venv/bin/python benchmarks/proxy_overhead.py \\
        --skip-litellm --concurrency 1 --rounds 1

What a young collection costs is the work of traversing the young containers (each visits all of its
referents, so one young dict of 10^5 items costs more than 10^3 small objects) plus whatever the
garbage it frees runs (finalizers, weakref callbacks, deallocation). So each sample records the
thread that triggered it, the young objects' total referents and the five with the most (type, count,
a hint of what it is), the types freed, and with GC_PROBE_CALLS=1 the Python and C functions called
*during* the collection (finalizers and callbacks; it slows them, so compare CPU without it).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import sys
import threading
import time
from typing import Any

OUT = os.environ.get("GC_PROBE_OUT")
CALLS = os.environ.get("GC_PROBE_CALLS") == "1"
SAMPLES = 40
TOP = 5

_pauses: list[tuple[int, float, float]] = []
_samples: list[dict[str, Any]] = []
_start: dict[str, Any] = {}
_child = {"is": False, "dumped": 0.0}
_state = {"serving": False}


def _hint(o: object) -> str:
    """A short, allocation-light description of a container: where it comes from or what it holds."""
    try:
        if isinstance(o, dict):
            keys = [repr(k)[:40] for k, _ in zip(o, range(4), strict=False)]
            return f"keys {keys}"
        if isinstance(o, (list, tuple, set, frozenset)) or type(o).__name__ == "deque":
            kinds = sorted({type(x).__name__ for x, _ in zip(o, range(50), strict=False)})  # type: ignore[call-overload]
            return f"items of {kinds}"
        code = getattr(o, "__code__", None) or getattr(o, "f_code", None) or getattr(o, "gi_code", None)
        code = code or getattr(o, "cr_code", None)
        if code is not None:
            return f"{code.co_qualname} {code.co_filename.rsplit('/', 2)[-1]}:{code.co_firstlineno}"
        module = getattr(type(o), "__module__", "")
        return f"{module}.{type(o).__qualname__}"
    except Exception as err:  # a probe must never break the process it observes
        return f"<{type(err).__name__}>"


class _Calls:
    """Functions called during one collection (finalizers, weakref callbacks), timed at top level."""

    def __init__(self) -> None:
        self.stack: list[tuple[str, float]] = []
        self.total: dict[str, list[float]] = {}

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            if event == "call":
                code = frame.f_code
                name = f"{code.co_qualname} {code.co_filename.rsplit('/', 2)[-1]}:{code.co_firstlineno}"
            else:
                name = f"{getattr(arg, '__qualname__', arg)} (C)"
            self.stack.append((name, time.thread_time()))
        elif event in ("return", "c_return", "c_exception") and self.stack:
            name, t0 = self.stack.pop()
            if not self.stack:
                entry = self.total.setdefault(name, [0, 0.0])
                entry[0] += 1
                entry[1] += time.thread_time() - t0

    def top(self) -> list[tuple[str, int, float]]:
        ranked = sorted(self.total.items(), key=lambda kv: -kv[1][1])[:10]
        return [(name, int(n), round(s * 1000, 3)) for name, (n, s) in ranked]


def _serving() -> bool:
    """The heap was frozen (the proxy serving), or this is the proxy's forked writer process.

    Asked only as a collection starts, and remembered once true: `gc.get_freeze_count()` walks the whole
    frozen list (~16 ms for 185,000 objects). Asked inside the timed window, as this probe once did, it
    made every young collection of a frozen process look like it cost ~20 ms of CPU."""
    if _state["serving"]:
        return True
    mp = sys.modules.get("multiprocessing")
    if gc.get_freeze_count() > 0 or (mp is not None and mp.current_process().name == "evolvable-writer"):
        _state["serving"] = True
    return _state["serving"]


def _callback(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        if not _serving():
            _start.pop("wall", None)
            return
        if len(_samples) < SAMPLES:
            with _detached():
                objects = gc.get_objects(info["generation"])
                _start["ids"] = {id(o): type(o).__name__ for o in objects}
                sizes = [(len(gc.get_referents(o)), i) for i, o in enumerate(objects)]
                sizes.sort(reverse=True)
                _samples.append(
                    {
                        "generation": info["generation"],
                        "thread": threading.current_thread().name,
                        "young": len(objects),
                        "young_referents": sum(n for n, _ in sizes),
                        "largest": [(type(objects[i]).__name__, n, _hint(objects[i])) for n, i in sizes[:TOP]],
                        "with_finalizer": sum(1 for o in objects if hasattr(type(o), "__del__")),
                    }
                )
                del objects, sizes
            if CALLS:
                _start["calls"] = _Calls()
                sys.setprofile(_start["calls"])
        _start["wall"], _start["cpu"] = time.perf_counter(), time.thread_time()
        return
    if "wall" not in _start:
        return
    wall, cpu = time.perf_counter() - _start["wall"], time.thread_time() - _start["cpu"]
    del _start["wall"]
    calls = _start.pop("calls", None)
    if calls is not None:
        sys.setprofile(None)
    _pauses.append((info["generation"], wall, cpu))
    ids = _start.pop("ids", None)
    if ids is not None:
        with _detached():
            alive = {id(o) for g in range(info["generation"], 3) for o in gc.get_objects(g)}
            freed: dict[str, int] = {}
            for object_id, kind in ids.items():
                if object_id not in alive:
                    freed[kind] = freed.get(kind, 0) + 1
            sample = _samples[-1]
            sample["collected"] = info.get("collected")
            sample["cpu_ms"] = round(cpu * 1000, 3)
            sample["wall_ms"] = round(wall * 1000, 3)
            sample["freed"] = sorted(freed.items(), key=lambda kv: -kv[1])[:8]
            if calls is not None:
                sample["calls"] = calls.top()
    if _child["is"] and time.monotonic() - _child["dumped"] > 1.0:
        _child["dumped"] = time.monotonic()  # the writer dies by SIGTERM with its process group: dump as it goes
        with _detached():
            _dump()


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
    mp = sys.modules.get("multiprocessing")
    name = mp.current_process().name if mp is not None else "MainProcess"
    report = {
        "argv": sys.argv[:12],
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "process": name,
        "threshold": gc.get_threshold(),
        "serving": by_generation,
        "samples": _samples,
    }
    with open(f"{OUT}.{os.getpid()}.json", "w") as f:
        json.dump(report, f)


def _on_sigterm(signum: int, frame: object) -> None:
    """uvicorn re-raises the SIGTERM it caught once it has shut down; its default action skips atexit."""
    _dump()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _after_fork() -> None:
    """A forked child (the writer) reports its own collections; multiprocessing ends it with `os._exit`,
    which skips atexit, so it dumps from multiprocessing's exit finalizers."""
    _pauses.clear()
    _samples.clear()
    _start.clear()
    _state["serving"] = False
    _child["is"] = True
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        mp_util.Finalize(None, _dump, exitpriority=100)


if OUT:
    os.register_at_fork(after_in_child=_after_fork)
    gc.callbacks.append(_callback)
    atexit.register(_dump)
    signal.signal(signal.SIGTERM, _on_sigterm)
