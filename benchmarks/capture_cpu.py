"""CPU per captured call, split by stage: the request path (frame the record), the writer (decode and
convert to ATDP events, then govern: tenant policy and redaction, as `evolvable serve` does by default)
and the store (apply into SQLite, in process, so all its CPU is counted).

Process CPU time, not wall time: it holds up on a shared machine (the load is printed anyway).
`--baseline-src DIR` runs an earlier version (DIR holds its `src/`, e.g. `git archive HEAD~3 src | tar
-x -C DIR`) in its own process in the same run, so the ratios compare like with like. Versions before
typed records spooled dicts through orjson; the worker uses whichever the version has.

    .venv/bin/python benchmarks/capture_cpu.py [--calls 4000] [--one-call] [--baseline-src DIR]

The heap is frozen before the timed part, as the forked writer freezes the one it inherits, and the cyclic GC
is off during it in versions whose writer turns it off for each batch it applies.
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

RESULTS = Path(__file__).parent / "results" / "capture_cpu.json"
MESSAGES = [
    {"role": "system", "content": "You are a support agent for an online shop. Answer briefly. " * 3},
    {"role": "user", "content": "Where is my order A-1? I ordered it last week and have not heard back."},
]


PROMPT_TOKENS, COMPLETION_TOKENS = 90, 40
"""Token ids (and completion logprobs) in each reply; `--tokens` sets them (RL capture of long prompts)."""


def reply_bytes(i: int, prompt_tokens: int = PROMPT_TOKENS, completion_tokens: int = COMPLETION_TOKENS) -> bytes:
    import orjson

    return orjson.dumps(
        {
            "id": f"chatcmpl-{i}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "mock",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "Your order A-1 shipped yesterday with UPS. " * 2},
                    "token_ids": list(range(completion_tokens)),
                    "logprobs": {"content": [{"token": "x", "logprob": -0.25} for _ in range(completion_tokens)]},
                }
            ],
            "prompt_token_ids": list(range(prompt_tokens)),
            "usage": {"prompt_tokens": 90, "completion_tokens": 40, "total_tokens": 130},
        }
    )


def frame_calls(n: int, replies: list[bytes], one_call: bool = False) -> list[bytes]:
    """The request path's share: what it does per call once the reply is in (parse check, build, encode)."""
    import orjson

    try:
        import msgspec

        from evolvable.proxy.records import CallRecord, encode
    except ImportError:  # untyped dict records
        out = []
        for i in range(n):
            reply = orjson.loads(replies[i])
            record = _dict_record(i)
            record["resp"] = reply
            record["lat"] = 12.5
            out.append(orjson.dumps(record, default=str))
        return out
    client_copy = _client_copy()
    out = []
    for i in range(n):
        client_copy(replies[i])  # the reply checked, and the token fields the client did not ask for taken out
        rid = f"req_{i}"
        call = CallRecord(
            id=rid,
            request_id=rid,
            trajectory_id=f"traj_{i if one_call else i // 8}",
            tenant_id="default",
            session_id=None if one_call else f"traj_{i // 8}",
            agent="support",
            request={"model": "mock", "messages": MESSAGES, "temperature": 0.2, "return_token_ids": True},
            injected=["return_token_ids"],
            upstream="mock",
            started=time.time(),
        )
        call.reply = msgspec.Raw(replies[i])
        call.latency_ms = 12.5
        out.append(encode(call))
    return out


def _client_copy() -> Any:
    """What the version's request path does with a reply before answering, when it asked for token ids the client
    did not (the records here say so): a copy without them, made without building the reply where it can."""
    import orjson

    from evolvable.proxy.capture import strip_token_fields

    try:
        from evolvable.proxy.capture import stripped_reply
    except ImportError:  # earlier versions: parsed once to check it, once more to strip it

        def parsed_twice(raw: bytes) -> bytes:
            orjson.loads(raw)
            shown = orjson.loads(raw)
            strip_token_fields(shown, False, True)
            return orjson.dumps(shown)

        return parsed_twice
    return lambda raw: stripped_reply(raw, False, True)


def _dict_record(i: int) -> dict[str, Any]:
    rid = f"req_{i}"
    return {
        "t": "call",
        "id": rid,
        "rid": rid,
        "traj": f"traj_{i // 8}",
        "tenant": "default",
        "sess": f"traj_{i // 8}",
        "agent": "support",
        "end_user": None,
        "ep": "chat",
        "req": {"model": "mock", "messages": MESSAGES, "temperature": 0.2, "return_token_ids": True},
        "injected": ["return_token_ids"],
        "cm": None,
        "up": "mock",
        "hv": None,
        "pv": None,
        "setv": False,
        "sub": False,
        "stream": False,
        "t0": time.time(),
    }


def convert(payloads: list[bytes]) -> list[Any]:
    """The writer's share before the store: decode and convert every record."""
    from evolvable.proxy.capture import Converter

    converter = Converter()
    try:
        from evolvable.proxy.records import decode
    except ImportError:
        import orjson

        return [e for p in payloads for e in converter.convert(orjson.loads(p))]
    return [e for p in payloads for e in converter.convert(decode(p))]


def run_worker(
    calls: int,
    one_call: bool = False,
    tokens: tuple[int, int] = (PROMPT_TOKENS, COMPLETION_TOKENS),
    gc_mode: str = "writer",
) -> dict[str, Any]:
    from evolvable.protocol.models import TrajectoryHeader, TrajectoryStarted
    from evolvable.store import Store

    replies = [reply_bytes(i, *tokens) for i in range(calls)]
    convert(frame_calls(16, replies, one_call))  # imports and first-use caches out of the timed part
    gc.collect()
    gc.freeze()  # as the forked writer does first: collections then skip the startup heap
    if gc_mode == "writer" and _writer_pauses_gc():
        gc.disable()  # as the forked writer does for each batch it applies
    figures: dict[str, Any] = {"calls": calls}
    cpu = time.process_time()
    payloads = frame_calls(calls, replies, one_call)
    figures["frame_us_per_call"] = (time.process_time() - cpu) / calls * 1e6
    figures["record_bytes"] = sum(map(len, payloads)) / calls
    cpu = time.process_time()
    events = convert(payloads)
    figures["convert_us_per_call"] = (time.process_time() - cpu) / calls * 1e6
    # Session calls' trajectories are opened by their session record, outside the timed part; a one-call
    # trajectory's start and end come with its call.
    starts = (
        []
        if one_call
        else [
            TrajectoryStarted(trajectory_id=tid, header=TrajectoryHeader(id=tid, agent="support"))
            for tid in dict.fromkeys(e.trajectory_id for e in events)
        ]
    )
    with tempfile.TemporaryDirectory() as tmp, Store.open(f"sqlite:///{tmp}/capture.db") as store:
        store.apply_events(starts)
        governed = govern(store, events, calls, figures)
        cpu = time.process_time()
        for i in range(0, len(governed), 256):
            store.apply_events(governed[i : i + 256])
        figures["store_us_per_call"] = (time.process_time() - cpu) / calls * 1e6
    figures["total_us_per_call"] = sum(figures[k] for k in STAGES)
    return figures


def _writer_pauses_gc() -> bool:
    """Whether this version's forked writer turns the cyclic GC off while it applies a batch."""
    try:
        from evolvable.proxy import writer
    except ImportError:
        return False
    return hasattr(writer, "_batch_gc")


STAGES = ("frame_us_per_call", "convert_us_per_call", "govern_us_per_call", "store_us_per_call")


def govern(store: Any, events: list[Any], calls: int, figures: dict[str, Any]) -> list[Any]:
    """The writer's governor as `evolvable serve` builds it by default (redaction on, names off), in the
    writer's batches; 0 for versions without one."""
    try:
        from evolvable.governance.wiring import Governance
    except ImportError:
        figures["govern_us_per_call"] = 0.0
        return events
    governor = Governance.for_store(store).governor
    governor.warm_up()
    governor.govern(events[:64])  # first-use caches (tenant policy) out of the timed part
    cpu = time.process_time()
    governed = [e for i in range(0, len(events), 256) for e in governor.govern(events[i : i + 256])]
    figures["govern_us_per_call"] = (time.process_time() - cpu) / calls * 1e6
    return governed


def spawn(
    calls: int, src: Path | None, one_call: bool = False, tokens: str = "", gc_mode: str = "writer"
) -> dict[str, Any]:
    env = tree_env(src)
    command = [sys.executable, __file__, "--worker", "--calls", str(calls), *(["--one-call"] if one_call else [])]
    command += ["--tokens", tokens] if tokens else []
    command += ["--gc", gc_mode]
    return json.loads(subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument(
        "--one-call",
        action="store_true",
        help="Calls without a session, each its own trajectory (start, step, end), as proxy_overhead.py sends.",
    )
    parser.add_argument(
        "--tokens",
        default=f"{PROMPT_TOKENS},{COMPLETION_TOKENS}",
        help="PROMPT,COMPLETION: token ids per reply (completion tokens come with logprobs).",
    )
    parser.add_argument(
        "--gc",
        choices=("writer", "on"),
        default="writer",
        help="The cyclic GC in the timed part: as the version's writer has it (off for each batch in versions that "
        "pause it), or on (to measure what pausing it saves).",
    )
    parser.add_argument("--baseline-src", type=Path)
    parser.add_argument("--baseline-label", default="baseline")
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved rounds; the best of each is kept.")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        prompt_tokens, completion_tokens = (int(n) for n in args.tokens.split(","))
        tokens = (prompt_tokens, completion_tokens)
        sys.stdout.write(json.dumps(run_worker(args.calls, args.one_call, tokens, args.gc)))
        return
    versions: dict[str, Path | None] = {"current": None}
    if args.baseline_src is not None:
        versions = {args.baseline_label: args.baseline_src, "current": None}
    with LoadMonitor() as monitor:
        runs = run_alternately(
            versions, args.rounds, lambda src: spawn(args.calls, src, args.one_call, args.tokens, args.gc)
        )
    load = monitor.summary()
    best = {label: {k: min(r[k] for r in rs) for k in rs[0]} for label, rs in runs.items()}
    stages = (*STAGES, "total_us_per_call", "record_bytes")
    print(f"{'stage (CPU us per call, best of ' + str(args.rounds) + ')':44}" + "".join(f"{v:>14}" for v in best))
    for stage in stages:
        row = "".join(f"{best[v][stage]:>14.1f}" for v in best)
        ratio = ""
        if len(best) == 2:
            base, cur = (best[v][stage] for v in versions)
            ratio = f"   x{base / cur:.2f} less" if cur else ""
        print(f"{stage:44}{row}{ratio}")
    print(describe(load))
    write_results(
        args.results,
        "capture_cpu",
        load,
        baseline=args.baseline_label if args.baseline_src else None,
        tokens_per_reply=args.tokens,
        gc=args.gc,
        best=best,
        runs=runs,
    )


if __name__ == "__main__":
    main()
