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

A probe, not a configuration: each ablation drops something the product needs. What the served proxy then
costs less, measured in place, is what that piece costs there (`hot_path_cpu.py` times pieces in a tight loop,
where caches stay warm)."""

from __future__ import annotations

import os
from typing import Any

ABLATIONS = ("capture", "spool-write", "metrics", "read-deadline", "writer", "store", "wal-checkpoint", "writer-group")


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
    if "wal-checkpoint" in pieces:
        from evolvable.store import engine

        engine._Checkpointer.nudge = lambda self: None  # type: ignore[method-assign]


_pieces = {p for p in os.environ.get("EVOLVABLE_ABLATE", "").split(",") if p}
if _pieces:
    install(_pieces)
