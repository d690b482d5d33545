"""The capture writer stores a call without a session as documents (`proxy.call_documents`, `store.apply_runs`)
instead of events. Whatever it takes that way must be stored exactly as the events' path stores it: the same
trajectory rows, step bodies, ledger entries and redactions, for records of every shape the conversion reads
(well-formed and not, with personal data in every free-form field, token ids, streams, tool calls), on both
backends; and what it cannot take (sessions, errors, values the models would coerce or reject) goes the events'
way without loss."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from tests.proxy.test_llm_step_one_pass import random_record

from evolvable.governance.wiring import Governance
from evolvable.protocol.models import CaptureMode
from evolvable.proxy.call_documents import call_documents
from evolvable.proxy.hooks import PassThroughGovernor
from evolvable.proxy.records import CallRecord, decode, encode
from evolvable.proxy.sessions import SessionManager
from evolvable.proxy.spool import SpoolReader
from evolvable.proxy.writer import BackgroundWriter, WriterStats
from evolvable.store import Store, TrajectoryFilter

PERSONAL = [
    "Mail jane.roe@example.org or call +1 415 555 0142 about order A-7.",
    "My card is 4111 1111 1111 1111, exp 09/29.",
    "Ship it to 221B Baker Street, London NW1 6XE.",
    "Where is my order? Nothing personal here.",
    "IBAN DE89 3704 0044 0532 0130 00, thanks",
    '{"customer": "ana@example.com", "phone": "030 1234567"}',
]


def _personal_record(rng: random.Random, i: int) -> CallRecord:
    """A well-formed call without a session, with personal data in its texts, tool calls and token ids."""
    text = rng.choice(PERSONAL)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": text if rng.random() < 0.8 else [{"type": "text", "text": text}]},
    ]
    if rng.random() < 0.4:
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": orjson.dumps({"q": text}).decode()},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{i}", "content": rng.choice(PERSONAL), "name": "lookup"},
        ]
    if rng.random() < 0.2:
        messages[-1]["provider_extra"] = {"note": rng.choice(PERSONAL)}
    reply_message: dict[str, Any] = {"role": "assistant", "content": rng.choice(PERSONAL)}
    if rng.random() < 0.3:
        reply_message["tool_calls"] = [
            {"id": f"call_r{i}", "type": "function", "function": {"name": "refund", "arguments": '{"email": "a@b.co"}'}}
        ]
    choice: dict[str, Any] = {"index": 0, "message": reply_message, "finish_reason": "stop"}
    reply: dict[str, Any] = {"id": f"chatcmpl-{i}", "model": "served", "choices": [choice]}
    if rng.random() < 0.4:  # token ids: dropped where redaction changed the call's text (no tokenizer here)
        choice["token_ids"] = [1, 2, 3]
        choice["logprobs"] = {"content": [{"token": "x", "logprob": -0.5}] * 3}
        reply["prompt_token_ids"] = [5, 6]
    if rng.random() < 0.8:
        reply["usage"] = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    request: dict[str, Any] = {"model": "mock", "messages": messages, "temperature": 0.3, "user": "u-1"}
    if rng.random() < 0.3:
        request["tools"] = [{"type": "function", "function": {"name": "lookup", "description": text}}]
    if rng.random() < 0.2:
        request["metadata"] = {"ticket": text}
    rid = f"req_p{i}"
    record = CallRecord(
        id=rid,
        request_id=rid,
        trajectory_id=f"traj_p{i}",
        tenant_id=rng.choice(["default", "acme"]),
        agent=rng.choice(["support", "jane.roe@example.org", None]),
        run_agent=rng.choice(["support", None]),
        end_user=rng.choice([None, "u-1"]),
        request=request,
        upstream="mock",
        started=1_760_000_000.5 + i,
        latency_ms=rng.choice([12.5, None]),
        reply=reply,
    )
    return decode(encode(record))  # type: ignore[return-value]


def _records(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    records = [random_record(rng, i) if i % 2 else _personal_record(rng, i) for i in range(count)]
    return [encode(record) for record in records]


def _writer(url: str, spool: Path, documents: bool, *, governed: bool = True) -> tuple[BackgroundWriter, Store]:
    store = Store.open(url)
    governor = Governance.for_store(store).governor if governed else PassThroughGovernor()
    writer = BackgroundWriter(
        SpoolReader(spool), store, governor, SessionManager(store), WriterStats(), documents=documents
    )
    return writer, store


def _contents(store: Store) -> dict[str, Any]:
    """Every stored row that either path writes, without arrival order and apply times."""
    with store.engine.connect() as conn:
        trajectories = sorted(
            # (a placeholder row, for events of a session whose start is not stored, is stamped when it is made)
            tuple(row[:8]) + ((None,) if row[10] else (row[8],)) + tuple(row[9:])
            for row in conn.exec_driver_sql(
                "SELECT id, tenant_id, agent, status, harness_version, policy_version, end_user, task_id, started_at, "
                "ended_at, placeholder, header FROM trajectories"
            )
        )
        steps = sorted(  # (SQLite: the step bodies as the text stored, compared byte for byte)
            tuple(str(value) for value in row)
            for row in conn.exec_driver_sql(
                "SELECT trajectory_id, step_id, kind, tool_call_id, response_id, started_at, body FROM steps"
            )
        )
        ledger = sorted(
            tuple(row) for row in conn.exec_driver_sql("SELECT event_id, trajectory_id FROM applied_events")
        )
    return {"trajectories": trajectories, "steps": steps, "ledger": ledger}


def _count_documents(writer: BackgroundWriter) -> list[int]:
    """How many runs each batch stored as documents (wraps the store's `apply_runs`)."""
    stored: list[int] = []
    apply_runs = writer.store.apply_runs

    def counting(runs: Any) -> Any:
        left = apply_runs(runs)
        stored.append(len(runs) - len(left))
        return left

    writer.store.apply_runs = counting  # type: ignore[method-assign]
    return stored


@pytest.mark.parametrize("governed", [True, False], ids=["governance", "pass-through"])
def test_documents_store_what_events_store(tmp_path: Path, governed: bool) -> None:
    count = 1200
    payloads = _records(count, seed=16)
    results = {}
    for documents in (True, False):
        db, spool = f"sqlite:///{tmp_path / f'{documents}.db'}", tmp_path / f"spool{documents}"
        writer, store = _writer(db, spool, documents, governed=governed)
        stored = _count_documents(writer)
        with store:
            for start in range(0, count, 256):
                writer.apply_batch(payloads[start : start + 256])
            results[documents] = _contents(store)
            if documents:
                taken = sum(stored)
                eligible = sum(call_documents(decode(p)) is not None for p in payloads)
                assert taken == eligible, (taken, eligible)
                assert eligible > count // 3  # the personal-data records, and some random ones
    assert results[True]["trajectories"] == results[False]["trajectories"]
    assert results[True]["ledger"] == results[False]["ledger"]
    assert results[True]["steps"] == results[False]["steps"]
    redacted = any("<EMAIL_" in step[-1] for step in results[True]["steps"])
    assert redacted == governed  # (redaction ran on this path, and only with governance)


def test_documents_match_events_on_both_backends(db_url: str, tmp_path: Path) -> None:
    """The same through the store's reads, so that PostgreSQL's documents are compared with SQLite's events."""
    payloads = _records(300, seed=7)
    events_writer, events_store = _writer(f"sqlite:///{tmp_path / 'events.db'}", tmp_path / "s1", False)
    docs_writer, docs_store = _writer(db_url, tmp_path / "s2", True)
    with events_store, docs_store:
        events_writer.apply_batch(payloads)
        docs_writer.apply_batch(payloads)
        expected, got = _read_back(events_store), _read_back(docs_store)
    assert got.keys() == expected.keys()
    for tid, trajectory in expected.items():
        assert got[tid] == trajectory, tid


def _read_back(store: Store) -> dict[str, Any]:
    with store.engine.connect() as conn:
        rows = list(conn.execute(sa.text("SELECT id, placeholder FROM trajectories")))
    out = {tid: store.get_trajectory(tid).model_dump(mode="json") for tid, _ in rows}
    for tid, placeholder in rows:
        if placeholder:  # (stamped when made, see `_contents`)
            out[tid].pop("started_at")
    return out


def test_a_replayed_batch_is_stored_once(db_url: str, tmp_path: Path) -> None:
    """A crash after the documents' transaction replays the batch: nothing is stored twice, nothing lost."""
    payloads = _records(200, seed=3)
    writer, store = _writer(db_url, tmp_path / "spool", True)
    with store:
        writer.apply_batch(payloads)
        first = _contents(store)
        writer.apply_batch(payloads)
        writer.apply_batch(payloads[::-1])
        assert _contents(store) == first


def test_runs_stored_purged_or_claimed_are_handed_back(db_url: str, tmp_path: Path) -> None:
    rng = random.Random(1)
    records = [_personal_record(rng, i) for i in range(6)]
    runs = [call_documents(r) for r in records]
    assert all(run is not None for run in runs)
    with Store.open(db_url) as store:
        assert store.apply_runs([runs[0], runs[1]]) == []  # type: ignore[list-item]
        assert store.delete_trajectories(TrajectoryFilter(ids=[runs[1].trajectory_id])) == 1  # type: ignore[union-attr]
        again = [call_documents(r) for r in records]
        twice = call_documents(records[2])
        left = store.apply_runs([again[0], again[1], again[2], twice, again[3]])  # type: ignore[list-item]
        # stored, purged, and the second of two for one trajectory come back; the rest are stored
        assert sorted(run.trajectory_id for run in left) == sorted(  # type: ignore[union-attr]
            [runs[0].trajectory_id, runs[1].trajectory_id, runs[2].trajectory_id]  # type: ignore[union-attr]
        )
        assert store.get_trajectory(runs[3].trajectory_id).steps  # type: ignore[union-attr]
        assert store.get_trajectory(runs[2].trajectory_id).steps  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "change",
    [
        {"session_id": "traj_x"},
        {"error": {"type": "upstream_error", "message": "boom", "status": 502}},
        {"endpoint": "completions"},
        {"request": {"model": 7, "messages": [{"role": "user", "content": "hi"}]}},
        {"request": {"model": "m", "messages": [{"role": "critic", "content": "hi"}]}},
        {"request": {"model": "m", "messages": [{"role": "user", "content": 5}]}},
        {"request": {"model": "m", "messages": [{"role": "user", "content": "hi", "name": 3}]}},
        {"request": {"model": "m", "messages": "hi"}},
        {"latency_ms": -1.0},
        {"reply": {"choices": [{"index": -1, "message": {"role": "assistant", "content": "x"}}]}},
        {"reply": {"choices": [{"message": {"role": "assistant", "content": "x"}, "token_ids": [1.0]}]}},
        {"reply": {"choices": [], "usage": {"prompt_tokens": "9"}}},
        {"reply": "not a reply"},
        {"sse_wire": "responses", "sse": "data: {}\n\n"},
    ],
)
def test_what_the_models_would_coerce_or_reject_goes_the_events_way(change: dict[str, Any]) -> None:
    fields: dict[str, Any] = {
        "id": "r",
        "request_id": "r",
        "trajectory_id": "traj_r",
        "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "started": 1_760_000_000.0,
        "latency_ms": 3.0,
        "reply": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]},
    }
    assert call_documents(CallRecord(**fields)) is not None
    fields.update(change)
    assert call_documents(CallRecord(**fields)) is None


def test_a_huge_integer_in_the_request_is_stored_through_events(tmp_path: Path) -> None:
    """A value JSON cannot carry as it is (an int beyond 64 bits) fails the documents' serializer: that run goes
    the events' way, whose serializer writes it, instead of failing the batch."""
    record = CallRecord(
        id="r",
        request_id="r",
        trajectory_id="traj_r",
        request={"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": 2**70},
        started=1_760_000_000.0,
        latency_ms=3.0,
        reply={"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]},
    )
    writer, store = _writer(f"sqlite:///{tmp_path / 'big.db'}", tmp_path / "spool", True)
    with store:
        writer.apply_batch([encode(record)])
        step = store.get_trajectory("traj_r").steps[0]
        assert step.sampling["seed"] == 2**70  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", [CaptureMode.metadata, CaptureMode.off])
def test_capture_other_than_full_goes_the_events_way(tmp_path: Path, mode: CaptureMode) -> None:
    """A tenant whose policy keeps less than everything: the governor declines the documents, and the events' path
    strips or drops the content as before."""
    writer, store = _writer(f"sqlite:///{tmp_path / 'p.db'}", tmp_path / "spool", True)
    governor: Any = writer.governor
    governor.directory.create_tenant("acme", capture=mode.value)
    rng = random.Random(5)
    records = [_personal_record(rng, i) for i in range(20)]
    for r in records:
        r.tenant_id = "acme"
    with store:
        writer.apply_batch([encode(r) for r in records])
        with store.engine.connect() as conn:
            bodies = [row[0] for row in conn.execute(sa.text("SELECT body FROM steps"))]
    if mode == CaptureMode.off:
        assert bodies == []
    else:
        assert len(bodies) == 20
        assert not any("example.org" in b or "Baker" in b for b in bodies)


def test_a_run_handed_back_that_cannot_be_converted_is_quarantined_alone(tmp_path: Path) -> None:
    """A run the governor hands back is made into events; if that fails, only its record is quarantined (with the
    conversion's error), and every other record of the batch is stored."""

    class HandsOneBack(PassThroughGovernor):
        def govern_documents(self, runs: Any) -> list[Any]:
            return [None if run.trajectory_id == "traj_p3" else run for run in runs]

    store = Store.open(f"sqlite:///{tmp_path / 'q.db'}")
    writer = BackgroundWriter(
        SpoolReader(tmp_path / "spool"), store, HandsOneBack(), SessionManager(store), WriterStats()
    )
    convert = writer.converter.convert

    def failing(rec: Any) -> Any:
        if rec.trajectory_id == "traj_p3":
            raise ValueError("no events for this one")
        return convert(rec)

    writer.converter.convert = failing  # type: ignore[method-assign]
    rng = random.Random(2)
    with store:
        writer.apply_batch([encode(_personal_record(rng, i)) for i in range(8)])
        with store.engine.connect() as conn:
            stored = sorted(conn.scalars(sa.text("SELECT id FROM trajectories")))
    assert stored == sorted(f"traj_p{i}" for i in range(8) if i != 3)
    (entry,) = writer.deadletter.entries()
    assert entry.trajectory_id == "traj_p3"
    assert "cannot convert: ValueError: no events for this one" in entry.error


def test_a_governor_returning_fewer_runs_never_misattributes_one(tmp_path: Path) -> None:
    """A governor that loses a run from a batch: nothing is stored under another record's trajectory; the records
    go to the dead-letter queue (kept, with the error), as any record the governor fails on alone does."""

    class LosesOne(PassThroughGovernor):
        def govern_documents(self, runs: Any) -> list[Any]:
            return list(runs)[1:]

    store = Store.open(f"sqlite:///{tmp_path / 'l.db'}")
    writer = BackgroundWriter(SpoolReader(tmp_path / "spool"), store, LosesOne(), SessionManager(store), WriterStats())
    writer.poison_retry_delays_s = ()
    rng = random.Random(4)
    with store:
        writer.apply_batch([encode(_personal_record(rng, i)) for i in range(4)])
        with store.engine.connect() as conn:
            stored = list(conn.execute(sa.text("SELECT trajectory_id, step_id FROM steps")))
    assert stored == []
    assert sorted(e.trajectory_id for e in writer.deadletter.entries()) == [f"traj_p{i}" for i in range(4)]
    assert all("returned 0 runs for 1" in e.error for e in writer.deadletter.entries())
