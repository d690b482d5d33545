"""`POST /v1/traces`: an OTLP/HTTP trace receiver that stores GenAI spans as trajectories.

Any agent instrumented with OpenTelemetry points its OTLP exporter here (with its tenant key in
`Authorization: Bearer ...`). Each trace becomes the trajectory `traj_<traceId>`. Exporters send a
trace's spans in several batches, children before their parents, so each batch extends the stored
trajectory: steps and signals get ids derived from their span ids (a re-sent span is a no-op), and the
header (agent, status, times) is written when the trace's root span arrives; until then the
trajectory reads as `running`. Events go through the Governor (redaction, consent) like captured
traffic, and are written before the answer, so an exporter's retry on 503 loses nothing. Spans before
their root name no agent: the governor applies the strictest of the tenant's capture modes to them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from fastapi import APIRouter, Request
from fastapi.responses import Response

from evolvable.errors import ConversionError, NotFound, StoreError
from evolvable.protocol.converters.otel import TraceFragment, span_step_id, trace_fragments
from evolvable.protocol.models import (
    Event,
    LLMCallStep,
    RunCapture,
    ToolCallStep,
    Trajectory,
    TrajectoryEnded,
    TrajectoryStarted,
    TrajectoryStatus,
    events_for,
)
from evolvable.proxy.hooks import Governor, Principal
from evolvable.proxy.otlp_codec import (
    JSON,
    Encoding,
    OTLPBodyError,
    decode_request,
    encode_response,
    encode_status,
    inflate,
)
from evolvable.proxy.runtime import ProxyRuntime
from evolvable.proxy.sessions import KEY_PREFIX
from evolvable.store import Store

router = APIRouter()


@dataclass
class IngestResult:
    accepted_spans: int = 0
    rejected: list[str] = field(default_factory=list)


@router.post("/v1/traces")
async def receive_traces(request: Request) -> Response:
    rt: ProxyRuntime = request.app.state.proxy
    reply_as = _reply_media_type(request.headers.get("content-type"))
    try:
        principal = await _tenant(rt, request.headers.get("authorization", ""))
        encoding = Encoding.of(request.headers.get("content-type"))
        raw = await request.body()
        limit = rt.config.max_body_bytes
        if len(raw) > limit:
            raise OTLPBodyError(413, f"request body exceeds {limit} bytes")
        doc = decode_request(inflate(raw, request.headers.get("content-encoding"), limit), encoding)
        try:
            fragments, rejected = trace_fragments(doc, tenant_id=principal.tenant_id)
        except ConversionError as err:
            raise OTLPBodyError(400, str(err)) from None
        try:
            result = await asyncio.to_thread(ingest, rt.store, rt.governor, fragments, principal.tenant_id)
        except StoreError as err:
            raise OTLPBodyError(503, f"cannot store the spans now, retry: {err}") from None
    except OTLPBodyError as err:
        return Response(encode_status(reply_as, err.status, err.message), err.status, media_type=reply_as)
    rejected += result.rejected
    message = "; ".join(dict.fromkeys(rejected))[:2000]
    return Response(encode_response(encoding, len(rejected), message), media_type=encoding.media_type)


def _reply_media_type(content_type: str | None) -> str:
    try:
        return Encoding.of(content_type).media_type
    except OTLPBodyError:
        return JSON


async def _tenant(rt: ProxyRuntime, authorization: str) -> Principal:
    """The caller's tenant. A session key names one run, not a tenant: OTLP needs a tenant key."""
    bearer = authorization[7:].strip() if authorization[:7].lower() == "bearer " else None
    if bearer and bearer.startswith(KEY_PREFIX):
        raise OTLPBodyError(403, "a session key cannot export traces; use a tenant API key")
    principal = await rt.authenticate(bearer)
    if principal is None:
        raise OTLPBodyError(401, "invalid API key")
    return principal


def ingest(store: Store, governor: Governor, fragments: list[TraceFragment], tenant_id: str) -> IngestResult:
    """Merge each fragment into its stored trajectory, governed, in one store transaction."""
    result = IngestResult()
    events: list[Event] = []
    runs: dict[str, RunCapture] = {}
    for fragment in fragments:
        stored = _stored(store, fragment.trajectory.id)
        if stored is not None and stored.tenant_id != tenant_id:
            result.rejected += [f"trace {fragment.trace_id}: trace id already in use"] * fragment.span_count
            continue
        _link_to_stored(fragment, stored)
        events += fragment_events(fragment)
        if stored is not None and stored.status != TrajectoryStatus.running:
            runs[stored.id] = stored.run_capture()  # the root span (it ends the run) wrote the header earlier
        result.accepted_spans += fragment.span_count
    if events:
        store.apply_events(governor.govern(events, runs))
    return result


def _stored(store: Store, trajectory_id: str) -> Trajectory | None:
    try:
        return store.get_trajectory(trajectory_id)
    except NotFound:
        return None


def _link_to_stored(fragment: TraceFragment, stored: Trajectory | None) -> None:
    """Parent and tool-call links to steps that arrived in earlier batches."""
    if stored is None:
        return
    stored_ids = {s.id for s in stored.steps}
    requested = {
        call.id: s.id
        for s in stored.steps
        if isinstance(s, LLMCallStep) and s.response
        for call in s.response.tool_calls or []
    }
    for step in fragment.trajectory.steps:
        parent_span = fragment.outside_parents.get(step.id)
        if parent_span is not None and span_step_id(fragment.trace_id, parent_span) in stored_ids:
            step.parent_step_id = span_step_id(fragment.trace_id, parent_span)
        if isinstance(step, ToolCallStep) and step.llm_step_id is None and step.tool_call_id in requested:
            step.llm_step_id = requested[step.tool_call_id]


def fragment_events(fragment: TraceFragment) -> list[Event]:
    """Idempotent events: the header's only with the root span, steps and signals always."""
    events: list[Event] = [*events_for(fragment.trajectory)]
    if fragment.has_root:
        return events
    return [e for e in events if not isinstance(e, TrajectoryStarted | TrajectoryEnded)]
