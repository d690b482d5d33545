"""The capture writer catching up on a backlog: CPU per record and bytes read from the spool per record while
`BackgroundWriter` drains a spool that holds `--calls` one-call records (the shape `capture_cpu.py --one-call`
frames; about 2 kB each, so the default fills one 16 MB segment and part of a second), as the forked writer
does it (the heap frozen, the cyclic GC off per batch), into SQLite in the same process.

A writer falls behind whenever calls come faster than it applies them (a burst, a slow disk, a restart with
records spooled). Each batch reads the segment from the checkpoint; this measures what those reads cost.

`--batch` sets the records per cycle (256, the writer's default). At a few per cycle, what every cycle costs
whatever it holds (a transaction, its look-ups, the spool's listing, read and checkpoint) shows, as it does for a
writer that keeps up with light traffic.

`--baseline-src DIR` runs an earlier version (DIR holds its `src/`) in its own processes, alternating with this
one round by round, so both see the same machine:

    .venv/bin/python benchmarks/writer_backlog.py [--calls 12000] [--rounds 3] [--batch 256] [--baseline-src DIR]

Prints a table (best round of each version) and writes benchmarks/results/writer_backlog.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_env import LoadMonitor, describe, run_alternately, tree_env, write_results
from capture_cpu import frame_calls, reply_bytes

RESULTS = Path(__file__).parent / "results" / "writer_backlog.json"


def _bytes_read() -> int:
    """What this process has read through `read` and its kin so far (/proc/self/io's rchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no rchar")


def drain_backlog(calls: int, batch: int = 256) -> dict[str, Any]:
    """Spool `calls` records, then time the writer applying them all."""
    from evolvable.governance.wiring import Governance
    from evolvable.proxy.sessions import SessionManager
    from evolvable.proxy.spool import Spool
    from evolvable.proxy.writer import BackgroundWriter, WriterStats, _batch_gc
    from evolvable.store import Store

    payloads = frame_calls(calls + 64, [reply_bytes(i, 0, 0) for i in range(calls + 64)], one_call=True)
    with tempfile.TemporaryDirectory() as tmp, Store.open(f"sqlite:///{tmp}/backlog.db") as store:
        with Spool(Path(tmp) / "spool", fsync="none") as spool:
            for payload in payloads:
                while not spool.append_nowait(payload):
                    time.sleep(0.001)
            if spool.wait_written(len(payloads), 60) is None:
                raise SystemExit("the spool did not write the backlog within 60 s")
            governor = Governance.for_store(store).governor
            governor.warm_up()
            writer = BackgroundWriter(
                spool.reader, store, governor, SessionManager(store, governor.redact_identifiers), WriterStats()
            )
            writer.batch_size = 64
            writer.cycle()  # first-use caches out of the timed part
            writer.batch_size = batch
            gc.collect()
            gc.freeze()  # as the forked writer does first
            read_before, cpu = _bytes_read(), time.process_time()
            applied = cycles = 0
            while True:
                with _batch_gc(True):
                    n = writer.cycle()
                if not n:
                    break
                applied, cycles = applied + n, cycles + 1
            spent, read = time.process_time() - cpu, _bytes_read() - read_before
            gc.unfreeze()
        with store.engine.connect() as conn:
            stored = conn.exec_driver_sql("SELECT count(*) FROM steps").scalar_one()
    if applied != calls or stored != calls + 64:
        raise SystemExit(f"applied {applied} and stored {stored} of {calls} (+64 warm-up) records")
    return {"us_per_record": spent / calls * 1e6, "kb_read_per_record": read / calls / 1024, "cycles": cycles}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=12_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256, help="Records per writer cycle.")
    parser.add_argument("--baseline-src", type=Path, help="An earlier version's tree (holding src/), run alternately.")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        sys.stdout.write(json.dumps(drain_backlog(args.calls, args.batch)))
        return
    versions: dict[str, Path | None] = {"current": None}
    if args.baseline_src is not None:
        versions["baseline"] = args.baseline_src

    def drain_in_worker(src: Path | None) -> dict[str, Any]:
        command = [sys.executable, __file__, "--worker", "--calls", str(args.calls), "--batch", str(args.batch)]
        out = subprocess.run(command, env=tree_env(src, HF_HUB_OFFLINE="1"), check=True, stdout=subprocess.PIPE)
        figures: dict[str, Any] = json.loads(out.stdout)
        return figures

    with LoadMonitor() as monitor:
        runs = run_alternately(versions, args.rounds, drain_in_worker)
    load = monitor.summary()
    best = {name: min(r["us_per_record"] for r in rounds) for name, rounds in runs.items()}
    read = {name: min(r["kb_read_per_record"] for r in rounds) for name, rounds in runs.items()}
    print(
        f"the writer draining a backlog of {args.calls} one-call records, {args.batch} per cycle "
        f"(best of {args.rounds} rounds)"
    )
    print(f"{'version':10}{'CPU us/record':>16}{'kB read/record':>16}")
    for name in versions:
        print(f"{name:10}{best[name]:>16.1f}{read[name]:>16.1f}")
    if "baseline" in best:
        print(f"baseline / current: CPU x{best['baseline'] / best['current']:.2f}")
    print(describe(load))
    write_results(
        args.results, "writer_backlog", load, calls=args.calls, batch=args.batch, best_us_per_record=best, runs=runs
    )


if __name__ == "__main__":
    main()
