"""Capture records: the typed, versioned contract between the request path and the background writer.

The request path builds one record per thing it captured (a session start, a call, a step, a signal,
a session end) and spools it as JSON through `encode`; the writer reads it back through `decode`.
One codec (msgspec JSON) on both sides. The wire keeps the short keys of the untyped dicts earlier
versions spooled (`t`, `traj`, `rid`, `hv`, ...), so records already on disk decode as version 1
(they carry no `v`), and the spool stays readable by tools that parse it as plain JSON (purge,
dead-letter listing).

A call's upstream reply goes into the record as the bytes the upstream sent (`msgspec.Raw`): the
request path frames them without re-serializing, and the writer decodes them with the rest.

Every record names its run (`run()`: the run's agent and the capture it asked for), so the writer
governs a step whose session started batches, or a restart, ago without reading the store back.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from evolvable.protocol.models import CaptureMode, RunCapture, TrajectoryStarted, TrajectoryStatus

RECORD_VERSION = 3
"""Written by this version. 1: the untyped dicts of earlier versions (no `v` key). 2: typed. 3: every
record names its run (`ra`, `cap`)."""


class CaptureRecord(msgspec.Struct, kw_only=True, tag_field="t"):
    """Fields every record has. `id` identifies the record (a request id, a step or signal id)."""

    version: int = msgspec.field(default=1, name="v")
    id: str | None = None
    trajectory_id: str = msgspec.field(name="traj")
    tenant_id: str = msgspec.field(default="default", name="tenant")
    end_user: str | None = None
    at: float | None = None
    """Unix time of what was recorded (the call's start for calls without it)."""
    run_agent: str | None = msgspec.field(default=None, name="ra")
    """The agent that runs the trajectory (a call's `agent` may be a sub-agent's); None before version 3."""
    capture: CaptureMode = msgspec.field(default=CaptureMode.full, name="cap")
    """The capture the run asked for (a run may ask for less than its tenant's policy)."""

    def run(self) -> RunCapture | None:
        """What the governor decides this record's capture by; None for a record written before version 3,
        which does not name its run (the governor then goes by a start event it saw, else the strictest of
        the tenant's modes)."""
        return RunCapture(self.run_agent, self.capture) if self.run_agent is not None else None


class SessionRecord(CaptureRecord, tag="session", kw_only=True):
    """A run started: the one run header of the capture path (the session's, as it goes to the store)."""

    agent: str | None = None
    task_id: str | None = None
    task_input: Any = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    harness_version: str | None = msgspec.field(default=None, name="hv")
    policy_version: str | None = msgspec.field(default=None, name="pv")

    def started(self) -> TrajectoryStarted:
        """The run's start event: the one run header of the capture path."""
        return run_started(self, started_at=self.at, task_id=self.task_id, task_input=self.task_input)


class CallRecord(CaptureRecord, tag="call", kw_only=True):
    """One model call as the proxy saw it: what it sent upstream and what came back (or what failed)."""

    request_id: str = msgspec.field(name="rid")
    session_id: str | None = msgspec.field(default=None, name="sess")
    """None: a call without a session (a one-step trajectory of its own)."""
    agent: str | None = None
    endpoint: str = msgspec.field(default="chat", name="ep")
    request: dict[str, Any] = msgspec.field(default_factory=dict, name="req")
    injected: list[str] = msgspec.field(default_factory=list)
    """Request fields the proxy added for token capture (not the client's sampling settings)."""
    client_model: str | None = msgspec.field(default=None, name="cm")
    upstream: str | None = msgspec.field(default=None, name="up")
    harness_version: str | None = msgspec.field(default=None, name="hv")
    policy_version: str | None = msgspec.field(default=None, name="pv")
    first_versions: bool = msgspec.field(default=False, name="setv")
    """The rewriter named the session's versions on this call (not at session start)."""
    sub_agent: bool = msgspec.field(default=False, name="sub")
    stream: bool = False
    started: float | None = msgspec.field(default=None, name="t0")
    latency_ms: float | None = msgspec.field(default=None, name="lat")
    ttft_ms: float | None = msgspec.field(default=None, name="ttft")
    reply: Any = msgspec.field(default=None, name="resp")
    """The upstream's reply: `msgspec.Raw` (its bytes) when written, parsed JSON when read."""
    sse: str | None = None
    sse_wire: str | None = None
    """The native protocol of a streamed reply (`messages`, `responses`); None: OpenAI chat chunks."""
    error: dict[str, Any] | None = msgspec.field(default=None, name="err")
    wire: dict[str, Any] | None = None
    """The protocol the client spoke (proxy.wire) and its response id."""


class StepRecord(CaptureRecord, tag="step", kw_only=True):
    """An ATDP step reported by the client or made by the proxy (a handoff, a skill use), as JSON."""

    step: dict[str, Any]


class SignalRecord(CaptureRecord, tag="signal", kw_only=True):
    signal: dict[str, Any]


class EndRecord(CaptureRecord, tag="end", kw_only=True):
    session_id: str | None = msgspec.field(default=None, name="sess")
    status: str
    outcome: float | None = None
    reason: str | None = None
    source: str | None = None


AnyRecord = SessionRecord | CallRecord | StepRecord | SignalRecord | EndRecord

_ENCODER = msgspec.json.Encoder(enc_hook=str)
_DECODER: msgspec.json.Decoder[AnyRecord] = msgspec.json.Decoder(AnyRecord)


def encode(record: CaptureRecord) -> bytes:
    """A record as spool bytes (JSON, written at the current `RECORD_VERSION`)."""
    record.version = RECORD_VERSION
    return _ENCODER.encode(record)


def decode(payload: bytes) -> AnyRecord:
    """Spool bytes (any version) as a typed record; `msgspec.ValidationError`/`DecodeError` when malformed."""
    return _DECODER.decode(payload)


def run_started(
    record: SessionRecord | CallRecord,
    *,
    started_at: float | None,
    task_id: str | None = None,
    task_input: Any = None,
    metadata: dict[str, Any] | None = None,
    status: TrajectoryStatus = TrajectoryStatus.running,
    ended_at: datetime | None = None,
) -> TrajectoryStarted:
    """The start event of a run, its ATDP header made from the record that opened it (a session, or a call without
    one: that run ends with its call, so its header says how and when). The event and its header are validated in
    one pass (a header validated first and then the event holding it cost 1.5x the CPU)."""
    tid = record.trajectory_id
    header = {
        "id": tid,
        "tenant_id": record.tenant_id,
        "agent": record.agent or "default",
        "end_user": record.end_user,
        "harness_version": record.harness_version,
        "policy_version": record.policy_version,
        "task_id": task_id,
        "task_input": task_input,
        "capture": record.capture,
        "started_at": datetime.fromtimestamp(started_at, UTC) if started_at else datetime.now(UTC),
        "metadata": metadata if metadata is not None else getattr(record, "metadata", None) or {},
        "status": status,
        "ended_at": ended_at,
    }
    event = {"event_id": f"{tid}:start", "trajectory_id": tid, "tenant_id": record.tenant_id, "header": header}
    return TrajectoryStarted.model_validate(event)
