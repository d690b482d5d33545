"""Takes one piece of Evolvable's request path out of `evolvable serve`, for `benchmarks/serving_ablation.py`.

On PYTHONPATH with `EVOLVABLE_ABLATE` naming pieces (comma-separated), the served proxy runs without them:

- `capture`: no capture record is made into spool bytes or written (nothing reaches the writer);
- `spool-write`: the record is made and encoded as usual, but not written to the spool file;
- `metrics`: requests are not counted or timed (the `observed` wrapper calls the app directly);
- `read-deadline`: no per-request read deadline is armed (uvicorn's own protocol behaviour);
- `writer`: records are spooled as usual, but the capture writer applies none (they stay in the spool), which
  tells the spool write on the request path from the writer's work beside it;
- `store`: the writer reads, converts and governs every record as usual, but stores none (its checkpoint moves on),
  which tells its CPU work from its database's;
- `wal-checkpoint`: SQLite's background WAL checkpoints are not run (the WAL grows until its backstop);
- `writer-group`: not an ablation but a change: the writer runs in a session of its own with its autogroup reniced,
  so that where the kernel groups processes by session its `nice` holds against every process, not only the proxy.
- `writer-spin`: a stand-in: the writer reads and checkpoints records as usual but, instead of applying them, spins
  for `EVOLVABLE_SPIN_US` (default 100) microseconds of wall time per record, touching no memory: bursts of CPU
  time like the writer's, without its memory traffic or system calls (preempted, it spins for less CPU time);
- `writer-yield`: a change: the writer applies batches of at most 16 records and yields its core
  (`sched_yield`) after each, so it never holds a core for more than about one batch;
- `writer-sched-idle`: a change: the writer runs under SCHED_IDLE (it runs only when its core has nothing else);
- `writer-slice`: a change: the writer asks for a 100 us EEVDF slice (`sched_setattr`; Linux 6.12 and later,
  x86-64), so a process woken on its core waits at most that long for it.

A probe, not a configuration: each ablation drops something the product needs. What the served proxy then
costs less, measured in place, is what that piece costs there (`hot_path_cpu.py` times pieces in a tight loop,
where caches stay warm)."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

ABLATIONS = (
    "capture",
    "spool-write",
    "metrics",
    "read-deadline",
    "writer",
    "store",
    "wal-checkpoint",
    "writer-group",
    "writer-spin",
    "writer-slice",
    "writer-yield",
    "writer-sched-idle",
)
SLICE_NS = 100_000


def install(pieces: set[str]) -> None:
    unknown = pieces - set(ABLATIONS)
    if unknown:
        raise SystemExit(f"EVOLVABLE_ABLATE names unknown pieces: {sorted(unknown)}; known: {ABLATIONS}")
    from evolvable.proxy import metrics, records, runtime, slow_clients, writer

    if "capture" in pieces:

        async def no_capture(self: Any, record: Any) -> bool:
            return True

        runtime.ProxyRuntime.spool_record = no_capture  # type: ignore[method-assign]
    if "spool-write" in pieces:

        async def encoded_only(self: Any, record: Any) -> bool:
            metrics.observe_capture(record)
            records.encode(record)
            return True

        runtime.ProxyRuntime.spool_record = encoded_only  # type: ignore[method-assign]
    if "metrics" in pieces:

        async def unobserved(app: Any, scope: Any, receive: Any, send: Any) -> None:
            await app(scope, receive, send)

        metrics.observed = unobserved
        from evolvable.proxy import app as proxy_app

        if hasattr(proxy_app, "observed"):
            proxy_app.observed = unobserved
    if "read-deadline" in pieces:
        slow_clients.DeadlineHttpToolsProtocol._arm_read_deadline = lambda self: None  # type: ignore[method-assign]
    if "writer" in pieces:
        writer.BackgroundWriter.cycle = lambda self: 0  # type: ignore[method-assign]
    if "store" in pieces:

        def governed_only(self: Any, items: list[Any]) -> None:
            runs = {item.record.trajectory_id: run for item in items if (run := item.record.run()) is not None}
            self.governor.govern([e for item in items for e in item.events], runs)

        writer.BackgroundWriter._apply_together = governed_only  # type: ignore[method-assign]
    if "writer-group" in pieces:
        child_main = writer._child_main

        def in_own_group(*args: Any) -> None:
            os.setsid()
            with open("/proc/self/autogroup", "w") as group:
                group.write(f"{args[-1]}\n")  # (`nice`, the last argument)
            child_main(*args)

        writer._child_main = in_own_group
    if "writer-spin" in pieces:
        writer.BackgroundWriter.cycle = _spinning_cycle  # type: ignore[method-assign]
    if "writer-slice" in pieces:
        run = writer.BackgroundWriter.run

        def run_with_short_slice(self: Any, should_stop: Any) -> None:
            set_slice(SLICE_NS)
            run(self, should_stop)

        writer.BackgroundWriter.run = run_with_short_slice  # type: ignore[method-assign]
    if "writer-yield" in pieces:
        yielding_run = writer.BackgroundWriter.run
        yielding_cycle = writer.BackgroundWriter.cycle

        def run_in_small_batches(self: Any, should_stop: Any) -> None:
            self.batch_size = 16
            yielding_run(self, should_stop)

        def cycle_then_yield(self: Any) -> int:
            n = yielding_cycle(self)
            os.sched_yield()
            return n

        writer.BackgroundWriter.run = run_in_small_batches  # type: ignore[method-assign]
        writer.BackgroundWriter.cycle = cycle_then_yield  # type: ignore[method-assign]
    if "writer-sched-idle" in pieces:
        idle_run = writer.BackgroundWriter.run

        def run_when_idle(self: Any, should_stop: Any) -> None:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            idle_run(self, should_stop)

        writer.BackgroundWriter.run = run_when_idle  # type: ignore[method-assign]
    if "wal-checkpoint" in pieces:
        from evolvable.store import engine

        engine._Checkpointer.nudge = lambda self: None  # type: ignore[method-assign]


def _spinning_cycle(self: Any) -> int:
    """`BackgroundWriter.cycle` with the records' work replaced by `EVOLVABLE_SPIN_US` of busy loop per record."""
    spin_s = float(os.environ.get("EVOLVABLE_SPIN_US", "100")) / 1e6
    with self.reader.cycle_lock():
        start = self.reader.load_checkpoint()
        payloads, nxt = self.reader.read(start, self.batch_size)
        until = time.perf_counter() + spin_s * len(payloads)
        while time.perf_counter() < until:
            pass
        if nxt != start:
            self.reader.save_checkpoint(nxt)
        return len(payloads)


def set_slice(runtime_ns: int) -> None:
    """This process's EEVDF slice (`sched_attr.sched_runtime` under SCHED_OTHER), its nice value kept."""
    import ctypes

    class SchedAttr(ctypes.Structure):
        _fields_ = [
            ("size", ctypes.c_uint32),
            ("sched_policy", ctypes.c_uint32),
            ("sched_flags", ctypes.c_uint64),
            ("sched_nice", ctypes.c_int32),
            ("sched_priority", ctypes.c_uint32),
            ("sched_runtime", ctypes.c_uint64),
            ("sched_deadline", ctypes.c_uint64),
            ("sched_period", ctypes.c_uint64),
            ("util_min", ctypes.c_uint32),
            ("util_max", ctypes.c_uint32),
        ]

    if platform.machine() != "x86_64":
        raise SystemExit(f"writer-slice calls x86-64's sched_setattr; this machine is {platform.machine()}")
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    attr = SchedAttr(size=ctypes.sizeof(SchedAttr), sched_policy=0, sched_nice=nice, sched_runtime=runtime_ns)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(314, 0, ctypes.byref(attr), 0) != 0:  # (x86-64's sched_setattr)
        raise OSError(ctypes.get_errno(), "sched_setattr")


_pieces = {p for p in os.environ.get("EVOLVABLE_ABLATE", "").split(",") if p}
if _pieces:
    install(_pieces)
