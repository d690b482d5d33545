"""Capture records: one typed, versioned codec for the spool; records spooled by earlier versions (untyped
dicts, no version) still decode and convert to the same events; every record names its run, so neither the
writer nor its governor reads the store back."""

from __future__ import annotations

from pathlib import Path

import msgspec
import orjson
import pytest
from tests.support.no_read_store import engine_only

from evolvable.governance.pipeline import Governor
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.models import (
    CaptureMode,
    Event,
    LLMCallStep,
    RunCapture,
    StepAppended,
    ToolCallStep,
    TrajectoryEnded,
    TrajectoryStarted,
    TrajectoryStatus,
)
from evolvable.proxy.capture import Converter
from evolvable.proxy.hooks import PassThroughGovernor
from evolvable.proxy.records import (
    RECORD_VERSION,
    CallRecord,
    CaptureRecord,
    EndRecord,
    SessionRecord,
    SignalRecord,
    StepRecord,
    decode,
    encode,
)
from evolvable.proxy.sessions import SessionManager
from evolvable.proxy.spool import Spool, SpoolReader
from evolvable.proxy.writer import BackgroundWriter, WriterStats
from evolvable.store import Store

REPLY = {
    "id": "chatcmpl-1",
    "model": "mock",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"id": 7}'}}
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
ASK = [{"role": "user", "content": "where is order 7?"}]
ANSWERED = [*ASK, REPLY["choices"][0]["message"], {"role": "tool", "tool_call_id": "call_1", "content": "shipped"}]

# Exactly what the proxy spooled before records were typed (PERFORMANCE.md, issue 19): untyped, no version.
V1_SESSION = {
    "t": "session",
    "id": "traj_v1",
    "traj": "traj_v1",
    "tenant": "acme",
    "agent": "support",
    "end_user": "alice",
    "task_id": "task_9",
    "task_input": {"ticket": 9},
    "metadata": {"intent": "order"},
    "hv": "h1",
    "pv": None,
    "at": 1.7e9,
}
V1_CALL = {
    "t": "call",
    "id": "req_1",
    "rid": "req_1",
    "traj": "traj_v1",
    "tenant": "acme",
    "sess": "traj_v1",
    "agent": "support",
    "end_user": "alice",
    "ep": "chat",
    "req": {"model": "mock", "messages": ASK, "temperature": 0.2, "return_token_ids": True},
    "injected": ["return_token_ids"],
    "cm": None,
    "up": "mock",
    "hv": "h1",
    "pv": None,
    "setv": False,
    "sub": False,
    "stream": False,
    "t0": 1.7e9 + 1,
    "resp": REPLY,
    "lat": 12.5,
}
V1_END = {
    "t": "end",
    "id": "end_1",
    "traj": "traj_v1",
    "sess": "traj_v1",
    "tenant": "acme",
    "end_user": "alice",
    "status": "completed",
    "outcome": 1.0,
    "reason": None,
    "at": 1.7e9 + 2,
}


def _typed_call(rid: str, messages: list[dict[str, object]], reply: bytes) -> CallRecord:
    record = CallRecord(
        id=rid,
        request_id=rid,
        trajectory_id="traj_v1",
        tenant_id="acme",
        session_id="traj_v1",
        agent="support",
        end_user="alice",
        request={"model": "mock", "messages": messages, "temperature": 0.2, "return_token_ids": True},
        injected=["return_token_ids"],
        upstream="mock",
        harness_version="h1",
        started=1.7e9 + 1,
        latency_ms=12.5,
    )
    record.reply = msgspec.Raw(reply)  # as the request path sets it: the upstream's bytes, not re-serialized
    return record


def _spooled(record: CallRecord) -> CallRecord:
    """The record as the writer sees it: through the spool's codec."""
    decoded = decode(encode(record))
    assert isinstance(decoded, CallRecord)
    return decoded


def test_every_record_kind_round_trips_at_the_current_version() -> None:
    records = [
        SessionRecord(id="traj_a", trajectory_id="traj_a", agent="a", metadata={"k": 1}, at=1.0),
        CallRecord(id="r", request_id="r", trajectory_id="traj_a", session_id="traj_a", error={"type": "x"}),
        StepRecord(id="s", trajectory_id="traj_a", step={"id": "s", "kind": "message"}),
        SignalRecord(id="g", trajectory_id="traj_a", signal={"id": "g", "kind": "outcome", "value": 1}),
        EndRecord(id="e", trajectory_id="traj_a", session_id="traj_a", status="completed", outcome=0.5),
    ]
    for record in records:
        payload = encode(record)
        assert orjson.loads(payload)["v"] == RECORD_VERSION
        assert decode(payload) == record


def test_a_reply_is_framed_as_the_upstream_sent_it() -> None:
    raw = orjson.dumps(REPLY)
    payload = encode(_typed_call("req_1", ASK, raw))
    assert raw in payload  # spliced in, byte for byte
    assert decode(payload).reply == REPLY  # type: ignore[union-attr]


def test_version_1_records_decode_and_convert_like_their_typed_successors() -> None:
    old = [decode(orjson.dumps(r)) for r in (V1_SESSION, V1_CALL, V1_END)]
    assert [r.version for r in old] == [1, 1, 1]
    assert isinstance(old[0], SessionRecord) and old[0].harness_version == "h1" and old[0].tenant_id == "acme"
    new = [
        SessionRecord(
            id="traj_v1",
            trajectory_id="traj_v1",
            tenant_id="acme",
            agent="support",
            end_user="alice",
            task_id="task_9",
            task_input={"ticket": 9},
            metadata={"intent": "order"},
            harness_version="h1",
            at=1.7e9,
        ),
        _typed_call("req_1", ASK, orjson.dumps(REPLY)),
        EndRecord(
            id="end_1",
            trajectory_id="traj_v1",
            session_id="traj_v1",
            tenant_id="acme",
            end_user="alice",
            status="completed",
            outcome=1.0,
            at=1.7e9 + 2,
        ),
    ]
    events_old = [e for r in old for e in Converter().convert(r)]
    events_new = [e for r in map(decode, map(encode, new)) for e in Converter().convert(r)]
    unstamped = [[e.model_dump(exclude={"occurred_at"}) for e in events] for events in (events_old, events_new)]
    assert unstamped[0] == unstamped[1]  # (`occurred_at` is when the event was made)
    start, step = events_old[0], events_old[1]
    assert isinstance(start, TrajectoryStarted) and start.header.task_input == {"ticket": 9}
    assert isinstance(step, StepAppended) and isinstance(step.step, LLMCallStep)
    assert step.step.sampling == {"temperature": 0.2}  # the injected token field is not the client's setting
    assert step.step.choices[0].message is not None and step.step.usage is not None


@pytest.mark.parametrize(
    "bad",
    [
        {**V1_CALL, "traj": 5},  # wrong type
        {k: v for k, v in V1_CALL.items() if k != "rid"},  # a required field missing
        {**V1_CALL, "t": "telegram"},  # an unknown kind
        [1, 2],
    ],
)
def test_malformed_records_fail_to_decode(bad: object) -> None:
    with pytest.raises(msgspec.ValidationError):
        decode(orjson.dumps(bad))


def test_a_tool_result_after_a_restart_is_named_from_the_conversation_not_the_store() -> None:
    """The converter has no store: a fresh one (a restarted writer) takes name and arguments of the call
    from the assistant message in the request; only the link to the earlier llm_call step is unknown."""
    events = Converter().convert(_spooled(_typed_call("req_2", ANSWERED, orjson.dumps(REPLY))))
    tool = next(e.step for e in events if isinstance(e, StepAppended) and isinstance(e.step, ToolCallStep))
    assert (tool.tool_name, tool.arguments, tool.result) == ("lookup", {"id": 7}, "shipped")
    assert tool.llm_step_id is None
    warm = Converter()
    warm.convert(_spooled(_typed_call("req_1", ASK, orjson.dumps(REPLY))))
    events = warm.convert(_spooled(_typed_call("req_2", ANSWERED, orjson.dumps(REPLY))))
    tool = next(e.step for e in events if isinstance(e, StepAppended) and isinstance(e.step, ToolCallStep))
    assert tool.llm_step_id == "step_req_1" and tool.tool_name == "lookup"


def test_the_writer_applies_version_1_and_2_records_from_one_spool(tmp_path: Path) -> None:
    """A spool left by an earlier version, continued by this one, drains into the store (real SQLite)."""
    spool_dir = tmp_path / "spool"
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        with Spool(spool_dir) as spool:
            for payload in (
                orjson.dumps(V1_SESSION),
                orjson.dumps(V1_CALL),
                encode(_typed_call("req_2", ANSWERED, orjson.dumps(REPLY))),
                encode(
                    EndRecord(
                        id="end_2", trajectory_id="traj_v1", tenant_id="acme", session_id="traj_v1", status="completed"
                    )
                ),
            ):
                assert spool.append_nowait(payload)
            spool.wait_written(4, 10)
        writer = BackgroundWriter(
            SpoolReader(spool_dir), store, PassThroughGovernor(), SessionManager(store), WriterStats()
        )
        assert writer.drain() == 4
        stored = store.get_trajectory("traj_v1")
    assert stored.harness_version == "h1" and stored.status.value == "completed"
    assert [s.kind for s in stored.steps] == ["llm_call", "tool_call", "llm_call"]
    tool = stored.steps[1]
    assert isinstance(tool, ToolCallStep) and tool.llm_step_id == "step_req_1"


def _without_run(record: CaptureRecord) -> bytes:
    """`record` as a version-2 proxy spooled it: no `ra` / `cap` (it did not name its run)."""
    data = orjson.loads(encode(record))
    del data["ra"], data["cap"]
    return orjson.dumps({**data, "v": 2})


def test_a_restarted_writer_governs_by_the_run_each_record_names_and_never_reads_the_store(tmp_path: Path) -> None:
    """Sessions start in one writer's batch; their steps reach a restarted writer, whose governor remembers
    nothing and may not read the store (`engine_only`). A version-3 step names its run (agent `support`, full
    capture: kept); a version-2 step names none and fails closed to the tenant's strictest mode (`off`)."""
    spool_dir = tmp_path / "spool"
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        directory = TenantDirectory(store.engine, cache_ttl_s=0)
        directory.create_tenant("acme", agent_capture={"hr-bot": "off"})

        def writer() -> BackgroundWriter:
            governor = Governor(engine_only(store), directory=directory, redact=False)
            return BackgroundWriter(SpoolReader(spool_dir), store, governor, SessionManager(store), WriterStats())

        def session(tid: str) -> SessionRecord:
            return SessionRecord(id=tid, trajectory_id=tid, tenant_id="acme", agent="support", run_agent="support")

        def step(tid: str) -> StepRecord:
            message = {"id": f"msg_{tid}", "kind": "message", "content": "where is order 7?"}
            return StepRecord(id=message["id"], trajectory_id=tid, tenant_id="acme", run_agent="support", step=message)

        with Spool(spool_dir) as spool:
            assert spool.append_nowait(encode(session("traj_new"))) and spool.append_nowait(encode(session("traj_old")))
            spool.wait_written(2, 10)
            assert writer().drain() == 2
            assert spool.append_nowait(encode(step("traj_new"))) and spool.append_nowait(_without_run(step("traj_old")))
            spool.wait_written(4, 10)
            assert writer().drain() == 2
        assert [s.content for s in store.get_trajectory("traj_new").steps] == ["where is order 7?"]  # type: ignore[union-attr]
        assert store.get_trajectory("traj_old").steps == []


def test_every_record_names_its_run_and_records_before_version_3_name_none() -> None:
    record = CallRecord(id="r", request_id="r", trajectory_id="traj_a", agent="helper", run_agent="lead")
    assert decode(encode(record)).run() == RunCapture("lead", CaptureMode.full)  # the run's agent, not the call's
    assert decode(orjson.dumps(V1_CALL)).run() is None
    assert decode(_without_run(record)).run() is None


def _one_call(rid: str, reply: bytes, error: dict[str, object] | None = None) -> CallRecord:
    record = _typed_call(rid, ASK, reply)
    record.trajectory_id, record.session_id, record.error = f"traj_{rid}", None, error
    return _spooled(record)


def test_a_run_of_one_call_is_stored_as_with_an_end_event(db_url: str) -> None:
    """A call without a session is a run of its own: its start says how and when it ended, instead of an end event
    after its step. The store holds exactly what the start, the step and an end event left (real databases), in a
    succeeded and a failed run, each header with its status and end time, and one ledger row fewer per run."""
    records = [
        _one_call("req_ok", orjson.dumps(REPLY)),
        _one_call("req_err", b"{}", {"type": "upstream", "status": 502}),
    ]
    folded = [e for record in records for e in Converter().convert(record)]
    assert [type(e) for e in folded] == [TrajectoryStarted, StepAppended] * 2
    with_ends: list[Event] = []
    for start, step in zip(folded[::2], folded[1::2], strict=True):
        assert isinstance(start, TrajectoryStarted) and isinstance(step, StepAppended)
        header = start.header.model_copy(update={"status": TrajectoryStatus.running, "ended_at": None})
        end = TrajectoryEnded(  # what the converter emitted before, from the step alone
            event_id=f"{start.trajectory_id}:end",
            trajectory_id=start.trajectory_id,
            tenant_id=start.tenant_id,
            status=TrajectoryStatus.failed if step.step.status == "error" else TrajectoryStatus.completed,
            ended_at=step.step.ended_at,
        )
        with_ends += [start.model_copy(update={"header": header}), step, end]
    stored: list[list[object]] = []
    for index, events in enumerate((folded, with_ends)):
        url = db_url.replace("store.db", f"store{index}.db") if db_url.startswith("sqlite") else db_url
        with Store.open(url) as store:
            store.apply_events(events)
            stored.append([store.get_trajectory(e.trajectory_id).model_dump() for e in folded[::2]])
            with store.engine.connect() as conn:
                ledger = conn.exec_driver_sql("SELECT count(*) FROM applied_events").scalar_one()
            assert ledger == len(events)
            if not db_url.startswith("sqlite"):
                with store.engine.begin() as conn:  # the second form into an empty database too
                    for table in ("applied_events", "steps", "trajectories"):
                        conn.exec_driver_sql(f"DELETE FROM {table}")
    assert stored[0] == stored[1]
    succeeded, failed = stored[0]
    assert (succeeded["status"], failed["status"]) == ("completed", "failed")
    assert succeeded["ended_at"] is not None and succeeded["ended_at"] == succeeded["steps"][0]["ended_at"]
