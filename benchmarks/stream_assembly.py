"""CPU of the writer's stream assembly (`assemble_stream`): the mock upstream's 20-chunk stream, and a long stream
of one token per chunk with token ids and logprobs (RL capture), for this tree beside another (`--baseline-src DIR`,
DIR holding its `src/`), each in its own processes, in rounds that alternate which version goes first; the best
round of each is kept. Process CPU time, one process per version and round.

    .venv/bin/python benchmarks/stream_assembly.py [--rounds 3] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from rich.console import Console
from rich.table import Table

from bench_env import LoadMonitor, describe, run_alternately, tree_env, write_results
from mock_upstream import STREAM_CHUNKS

RESULTS = Path(__file__).parent / "results" / "stream_assembly.json"
LONG_TOKENS = 1000


def long_stream(tokens: int = LONG_TOKENS) -> str:
    """One token per chunk, each with its id and logprob, as an engine streaming for RL capture sends it."""
    chunks = [
        {
            "id": "chatcmpl-long",
            "object": "chat.completion.chunk",
            "model": "mock",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": f"t{i} "},
                    "token_ids": [i],
                    "logprobs": {"content": [{"token": f"t{i}", "logprob": -0.25}]},
                    "finish_reason": "stop" if i == tokens - 1 else None,
                }
            ],
        }
        for i in range(tokens)
    ]
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


STREAMS = {"mock, 20 chunks": (STREAM_CHUNKS.decode(), 4000), f"{LONG_TOKENS} one-token chunks": (long_stream(), 40)}


def run_worker() -> dict[str, Any]:
    """CPU us per assembled stream, best of five repetitions, for each stream; and the reply's text length."""
    from evolvable.proxy.capture import assemble_stream

    figures: dict[str, Any] = {}
    for name, (text, n) in STREAMS.items():
        assemble_stream(text)
        best = float("inf")
        for _ in range(5):
            cpu = time.process_time()
            for _ in range(n):
                reply = assemble_stream(text)
            best = min(best, (time.process_time() - cpu) / n * 1e6)
        figures[name] = {"us_per_stream": best, "content_chars": len(reply["choices"][0]["message"]["content"])}
    return figures


def spawn(src: Path | None) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker"], env=tree_env(src), check=True, stdout=subprocess.PIPE
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", type=Path, help="An earlier version's tree (holding src/).")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        sys.stdout.write(json.dumps(run_worker()))
        return
    versions: dict[str, Path | None] = {"current": None}
    if args.baseline_src is not None:
        versions["baseline"] = args.baseline_src
    with LoadMonitor() as monitor:
        runs = run_alternately(versions, args.rounds, spawn)
    load = monitor.summary()
    best = {v: {s: min(r[s]["us_per_stream"] for r in runs[v]) for s in STREAMS} for v in versions}
    same = all(
        r[s]["content_chars"] == runs["current"][0][s]["content_chars"]
        for v in versions
        for r in runs[v]
        for s in STREAMS
    )
    table = Table(title=f"assemble_stream, CPU us per stream (best of {args.rounds} rounds x 5)")
    for column in ("stream", *versions, *(["ratio"] if "baseline" in versions else [])):
        table.add_column(column)
    for stream in STREAMS:
        ratio = [f"x{best['baseline'][stream] / best['current'][stream]:.2f} less"] if "baseline" in versions else []
        table.add_row(stream, *(f"{best[v][stream]:.1f}" for v in versions), *ratio)
    console = Console()
    console.print(table)
    console.print(f"every version assembled the same text length: {same}")
    console.print(describe(load))
    recorded = {"rounds": args.rounds, "baseline": "given" if args.baseline_src else "none"}
    write_results(args.results, "stream_assembly", load, args=recorded, best=best, same_content=same)


if __name__ == "__main__":
    main()
