"""The spool alone at concurrency 1: how long a call waits for its record to be written
(`append_durable`, as with `reply_after_spooled`), and whether its slow waits fell during an fdatasync.

Records of 2.7 kB (a typical call record), one at a time, 1.5 ms apart (the rest of a call), with the
default `spool_fsync: interval`. Wall-clock figures: print the load with them. To compare with an
earlier version, run it with that version's `src/` first on PYTHONPATH.

    PYTHONPATH=src .venv/bin/python benchmarks/spool_tail.py [--records 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from evolvable.proxy import spool as spool_module
from evolvable.proxy.spool import Spool


async def measure(records: int, directory: Path) -> None:
    syncs: list[tuple[float, float]] = []
    fdatasync = os.fdatasync

    def timed_fdatasync(fd: int) -> None:
        started = time.perf_counter()
        fdatasync(fd)
        syncs.append((started, time.perf_counter()))

    spool_module.os.fdatasync = timed_fdatasync  # type: ignore[attr-defined]
    spool = Spool(directory, fsync="interval", fsync_interval_s=0.05).open()
    waits: list[tuple[float, float]] = []
    try:
        for _ in range(records):
            started = time.perf_counter()
            await spool.append_durable(b"x" * 2700, 10)
            waits.append((started, time.perf_counter()))
            await asyncio.sleep(0.0015)
    finally:
        spool.close()
        spool_module.os.fdatasync = fdatasync  # type: ignore[attr-defined]
    durations = sorted(end - start for start, end in waits)
    slow = [(start, end) for start, end in waits if end - start > 0.005]
    during_sync = sum(any(s < end and e > start for s, e in syncs) for start, end in slow)
    p = lambda q: durations[int(q * (len(durations) - 1))] * 1000  # noqa: E731
    print(
        f"append_durable ms: p50 {p(0.5):.3f} p95 {p(0.95):.3f} p99 {p(0.99):.3f} max {durations[-1] * 1000:.1f}; "
        f"waits > 5 ms: {len(slow)}, during an fdatasync: {during_sync}; load average {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(measure(args.records, Path(tmp)))


if __name__ == "__main__":
    main()
