"""What pausing the cyclic GC for each batch saves the background writer: CPU per call of the writer's work
(decode and convert, govern, store) in batches of 256, as `BackgroundWriter.cycle` applies them, with the GC
on throughout against off for each batch (on between batches), in the same run.

Each mode runs in its own process, in interleaved rounds; the best round of each is kept. The heap is frozen
first, as the forked writer freezes the one it inherits. Process CPU time, not wall time.

    .venv/bin/python benchmarks/writer_gc.py [--calls 4000] [--rounds 4] [--tokens 90,40]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_env import LoadMonitor, describe, write_results
from capture_cpu import frame_calls, reply_bytes

RESULTS = Path(__file__).parent / "results" / "writer_gc.json"
BATCH = 256
MODES = ("gc on", "gc paused per batch")


def run_worker(calls: int, mode: str, tokens: tuple[int, int], one_call: bool) -> dict[str, Any]:
    from evolvable.governance.wiring import Governance
    from evolvable.proxy.capture import Converter
    from evolvable.proxy.records import decode
    from evolvable.store import Store

    replies = [reply_bytes(i, *tokens) for i in range(calls)]
    payloads = frame_calls(calls, replies, one_call)
    with tempfile.TemporaryDirectory() as tmp, Store.open(f"sqlite:///{tmp}/writer.db") as store:
        governor = Governance.for_store(store).governor
        governor.warm_up()
        converter = Converter()
        warm = [e for p in payloads[:64] for e in converter.convert(decode(p))]
        store.apply_events(governor.govern(warm))
        payloads = payloads[64:]
        gc.collect()
        gc.freeze()
        cpu = time.process_time()
        for start in range(0, len(payloads), BATCH):
            if mode == MODES[1]:
                gc.disable()
            events = [e for p in payloads[start : start + BATCH] for e in converter.convert(decode(p))]
            store.apply_events(governor.govern(events))
            del events
            gc.enable()
        return {"writer_us_per_call": (time.process_time() - cpu) / len(payloads) * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tokens", default="90,40", help="PROMPT,COMPLETION token ids per reply.")
    parser.add_argument("--sessions", action="store_true", help="Session calls (8 per trajectory), not one-call.")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    tokens = tuple(int(n) for n in args.tokens.split(","))
    if args.worker:
        figures = run_worker(args.calls, args.worker, (tokens[0], tokens[1]), not args.sessions)
        sys.stdout.write(json.dumps(figures))
        return
    runs: dict[str, list[float]] = {mode: [] for mode in MODES}
    with LoadMonitor() as monitor:
        for _ in range(args.rounds):
            for mode in MODES:
                command = [sys.executable, __file__, "--worker", mode, "--calls", str(args.calls)]
                command += ["--tokens", args.tokens, *(["--sessions"] if args.sessions else [])]
                out = subprocess.run(command, env=dict(os.environ), check=True, stdout=subprocess.PIPE).stdout
                runs[mode].append(json.loads(out)["writer_us_per_call"])
    load = monitor.summary()
    best = {mode: min(values) for mode, values in runs.items()}
    print(f"{'writer CPU us per call (best of ' + str(args.rounds) + ')':44}" + "".join(f"{m:>22}" for m in MODES))
    print(f"{'batches of ' + str(BATCH):44}" + "".join(f"{best[m]:>22.1f}" for m in MODES))
    print(f"paused / on: x{best[MODES[0]] / best[MODES[1]]:.2f} less")
    print(describe(load))
    write_results(
        args.results,
        "writer_gc",
        load,
        tokens_per_reply=args.tokens,
        one_call=not args.sessions,
        best_us_per_call=best,
        runs=runs,
    )


if __name__ == "__main__":
    main()
