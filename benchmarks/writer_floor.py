"""How far a redesign of the capture writer could go: CPU per one-call record of the writer as it is (decode,
convert to ATDP models, govern, apply the events) against a floor that does the data's work on plain data
(decode, redact the messages' texts with the same engine, build the rows' values and the step's JSON document
directly, insert the same tables in one transaction per batch, one ledger row per record), in the same run.

The floor is a probe, not a writer: it validates nothing, handles only a chat call with no session, no tools
and no token ids, skips tenant policy, and scans message texts only (the writer also scans identifiers and
metadata values, which are short). What it measures is what the work costs without the layers around it
(pydantic models, events, the generic ingest), so the gap says what a redesign could save at most. A third
mode, "floor, checked", adds back what a redesign would have to keep of the checks (the messages validated as
ATDP messages, the look-ups of existing and purged trajectories and of claimed event ids, a ledger row per
event), which says what it could save at least.

Each mode runs in its own process on a fresh SQLite database, in interleaved rounds; the best round of each is
kept. Process CPU time; SQLite runs in the process, so its work counts, as in the forked writer.

    .venv/bin/python benchmarks/writer_floor.py [--calls 8000] [--rounds 3]
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
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_env import LoadMonitor, describe, write_results
from capture_cpu import frame_calls, reply_bytes

RESULTS = Path(__file__).parent / "results" / "writer_floor.json"
BATCH = 256
MODES = ("writer", "writer, events", "floor", "floor, checked")
"""`writer`: as it ships (calls without a session as documents); `writer, events`: every record made into events."""


def current_writer(store: Any, spool: Path, documents: bool = True) -> Callable[[list[bytes]], None]:
    """What `BackgroundWriter.cycle` does with a batch it has read: decode, then govern and apply, through the
    writer's own code. `documents`: calls without a session as documents (the default), else as events."""
    from evolvable.governance.wiring import Governance
    from evolvable.proxy.sessions import SessionManager
    from evolvable.proxy.spool import SpoolReader
    from evolvable.proxy.writer import BackgroundWriter, WriterStats

    governor = Governance.for_store(store).governor
    governor.warm_up()
    writer = BackgroundWriter(
        SpoolReader(spool), store, governor, SessionManager(store), WriterStats(), documents=documents
    )
    return writer.apply_batch


def floor(
    store: Any, checked: bool = False, decode: Callable[[bytes], Any] | None = None
) -> Callable[[list[bytes]], None]:
    """The same records to the same tables, on plain data. `checked` adds what a redesign would have to keep of
    the checks: the client's messages and the reply's validated as ATDP messages, the look-ups of existing and
    purged trajectories and of claimed event ids, and a ledger row per event (start, step, end). `decode`: how a
    spooled record is read (the spool's codec by default; `floor_writer/` assembles streamed replies too)."""
    import orjson
    from pydantic import TypeAdapter

    from evolvable.governance.redaction.engine import PlaceholderMap, default_engine
    from evolvable.protocol.models import SCHEMA_VERSION, ChatMessage
    from evolvable.proxy.records import decode as decode_record

    decode = decode or decode_record
    from evolvable.store import ingest, sqlite_bulk
    from evolvable.store.engine import RawJSON
    from evolvable.store.rows import STEP_COLUMNS
    from evolvable.store.tables.trajectories import applied_events, steps, trajectories

    engine = default_engine()
    engine.redact("warm up: call 555-0100 or mail a@example.com", PlaceholderMap())
    header_columns = ("id", "tenant_id", "agent", "status", "started_at", "ended_at", "placeholder", "header")
    validate_messages = TypeAdapter(list[ChatMessage]).validate_python

    def apply(batch: list[bytes]) -> None:
        headers, step_rows, ledger = [], [], []
        now = datetime.now(UTC)
        for payload in batch:
            rec = decode(payload)
            tid, placeholders = rec.trajectory_id, PlaceholderMap()
            messages = [_redacted_message(m, engine, placeholders) for m in rec.request.get("messages") or ()]
            reply = rec.reply
            if checked:
                validate_messages(rec.request.get("messages") or [])
                validate_messages([c["message"] for c in reply.get("choices") or ()])
            choices = [
                {
                    "index": c.get("index", 0),
                    "message": _redacted_message(c["message"], engine, placeholders),
                    "finish_reason": c.get("finish_reason"),
                }
                for c in reply.get("choices") or ()
            ]
            started = datetime.fromtimestamp(rec.started, UTC)
            ended = datetime.fromtimestamp(rec.started + rec.latency_ms / 1000.0, UTC)
            step_id = f"step_{rec.request_id}"
            body = {
                "id": step_id,
                "kind": "llm_call",
                "agent": rec.agent,
                "started_at": started,
                "ended_at": ended,
                "endpoint": rec.endpoint,
                "model": reply.get("model"),
                "request_messages": messages,
                "sampling": {k: v for k, v in rec.request.items() if k not in ("model", "messages")},
                "choices": choices,
                "usage": reply.get("usage"),
                "latency_ms": rec.latency_ms,
                "request_id": rec.request_id,
                "response_id": reply.get("id"),
                "metadata": {"upstream": rec.upstream},
            }
            document = RawJSON(orjson.dumps(body, option=orjson.OPT_UTC_Z).decode())
            header = {"schema_version": SCHEMA_VERSION, "capture": "full", "metadata": {"session": "none"}}
            headers.append((tid, rec.tenant_id, rec.agent, "completed", started, ended, False, header))
            step_rows.append((tid, step_id, "llm_call", None, reply.get("id"), started, document))
            claims = ("start", step_id, "end") if checked else (rec.request_id,)
            ledger += [(f"{tid}:{claim}", tid, now) for claim in claims]
        with store._writer.begin() as conn:
            if checked:
                ids = [row[0] for row in headers]
                existing = ingest._existing(conn, ids)
                ingest._purged(conn, [tid for tid in ids if tid not in existing])
                sqlite_bulk.existing_keys(conn, applied_events.c.event_id, [row[0] for row in ledger])
            sqlite_bulk.insert_values_or_ignore(
                conn, applied_events, ("event_id", "trajectory_id", "applied_at"), ledger
            )
            sqlite_bulk.insert_values_or_ignore(conn, trajectories, header_columns, headers)
            sqlite_bulk.insert_values_or_ignore(conn, steps, STEP_COLUMNS, step_rows)

    return apply


def _redacted_message(message: dict[str, Any], engine: Any, placeholders: Any) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": engine.redact(content, placeholders).text}
    return dict(message)


def run_worker(mode: str, calls: int) -> dict[str, Any]:
    from evolvable.store import Store

    replies = [reply_bytes(i, 0, 0) for i in range(calls + 64)]
    payloads = frame_calls(calls + 64, replies, one_call=True)
    with tempfile.TemporaryDirectory() as tmp, Store.open(f"sqlite:///{tmp}/floor.db") as store:
        if mode.startswith("writer"):
            apply = current_writer(store, Path(tmp) / "spool", documents=mode == "writer")
        else:
            apply = floor(store, checked=mode == "floor, checked")
        apply(payloads[:64])  # first-use caches out of the timed part
        gc.collect()
        gc.freeze()  # as the forked writer does first
        cpu = time.process_time()
        for start in range(64, len(payloads), BATCH):
            gc.disable()  # as the forked writer does for each batch
            apply(payloads[start : start + BATCH])
            gc.enable()
        spent = time.process_time() - cpu
        with store.engine.connect() as conn:
            stored = conn.exec_driver_sql("SELECT count(*) FROM steps").scalar_one()
    return {"us_per_call": spent / calls * 1e6, "stored_calls": stored - 64}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        sys.stdout.write(json.dumps(run_worker(args.worker, args.calls)))
        return
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with LoadMonitor() as monitor:
        for round_ in range(args.rounds):
            for mode in MODES if round_ % 2 == 0 else reversed(MODES):
                command = [sys.executable, __file__, "--worker", mode, "--calls", str(args.calls)]
                out = subprocess.run(command, env=dict(os.environ), check=True, stdout=subprocess.PIPE).stdout
                runs[mode].append(json.loads(out))
    load = monitor.summary()
    best = {mode: min(r["us_per_call"] for r in runs[mode]) for mode in MODES}
    print(f"{'CPU us per one-call record (best of ' + str(args.rounds) + ')':48}" + "".join(f"{m:>16}" for m in MODES))
    print(f"{'decode .. stored, batches of ' + str(BATCH):48}" + "".join(f"{best[m]:>16.1f}" for m in MODES))
    print(
        f"writer / floor: x{best['writer'] / best['floor']:.2f}; writer / checked floor: "
        f"x{best['writer'] / best['floor, checked']:.2f}; events / documents: "
        f"x{best['writer, events'] / best['writer']:.2f}"
    )
    print(describe(load))
    write_results(args.results, "writer_floor", load, calls=args.calls, best_us_per_call=best, runs=runs)


if __name__ == "__main__":
    main()
