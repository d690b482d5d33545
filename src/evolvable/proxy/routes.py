"""The proxy's non-hot-path API: sessions, explicit steps, signals, trajectories, models.

Writes go through the spool like captured calls (so governance sees everything before the store);
reads first wait for the writer to catch up (read-your-writes), bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from datetime import datetime
from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from evolvable.errors import (
    Conflict,
    EvolvableError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ResourceNotFound,
    Unauthenticated,
    Unavailable,
)
from evolvable.protocol.models import (
    SignalKind,
    Step,
    TrajectoryStatus,
    new_id,
    utcnow,
)
from evolvable.proxy.capture import tool_step_id
from evolvable.proxy.hooks import Principal, Role, SessionContext
from evolvable.proxy.limits import InvalidInput, check_depth, check_storable
from evolvable.proxy.records import CaptureRecord, EndRecord, SignalRecord
from evolvable.proxy.runtime import ProxyRuntime, step_record
from evolvable.proxy.sessions import KEY_PREFIX, Session, new_session_id
from evolvable.store import InvalidCursor, TrajectoryFilter
from evolvable.telemetry import metrics

router = APIRouter()
_STEP: TypeAdapter[Step] = TypeAdapter(Step)


def _json(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def _rt(request: Request) -> ProxyRuntime:
    runtime: ProxyRuntime = request.app.state.proxy
    return runtime


async def _caller(request: Request, *, allow_ended: bool = False) -> tuple[Principal, Session | None]:
    """The caller's principal, and its session when it authenticated with a session key.

    A session key dies when its session ends or the key that created it is revoked; `allow_ended`
    lets an ended session's own key reach `end` (which answers a status change with 409)."""
    auth = request.headers.get("authorization", "")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    rt = _rt(request)
    if bearer and bearer.startswith(KEY_PREFIX):
        session = rt.sessions.cached_by_key(bearer) or await asyncio.to_thread(rt.sessions.load_by_key, bearer)
        if session is None:
            raise Unauthenticated("invalid session API key")
        if not await rt.minting_key_active(session) or (not session.running and not allow_ended):
            raise Unauthenticated(
                "this session key is no longer valid (session ended or key revoked)", code="session_key_expired"
            )
        return Principal(tenant_id=session.tenant_id, role=Role.session, session_id=session.id), session
    principal = await rt.authenticate(bearer)
    if principal is None:
        raise Unauthenticated("invalid API key")
    return principal, None


async def _principal(request: Request) -> Principal:
    return (await _caller(request))[0]


async def _session(request: Request, session_id: str, *, allow_ended: bool = False) -> Session:
    """The session, if the caller may use it: its own key, or a principal of its tenant."""
    rt = _rt(request)
    principal, own = await _caller(request, allow_ended=allow_ended)
    if own is not None and own.id != session_id:
        raise ResourceNotFound(f"session {session_id} not found", code="session_not_found")
    session = own or rt.sessions.cached_by_id(session_id)
    if session is None:
        session = await asyncio.to_thread(rt.sessions.load_by_id, session_id)
    if session is None or session.tenant_id != principal.tenant_id:
        raise ResourceNotFound(f"session {session_id} not found", code="session_not_found")
    return session


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field("default", min_length=1, max_length=200)
    task_input: Any = None
    task_id: str | None = Field(None, max_length=1000)
    end_user: str | None = Field(None, max_length=1000)
    metadata: dict[str, Any] = Field(default_factory=dict)
    model: str | None = Field(
        None, description="The model alias the session will call (helps the rewriter pin a policy)."
    )


class SessionEnd(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: TrajectoryStatus = TrajectoryStatus.completed
    outcome: float | None = Field(None, allow_inf_nan=False)
    reason: str | None = Field(None, max_length=500, description="Why the run ended; kept as metadata.end_reason.")


class SignalIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: SignalKind
    value: float = Field(allow_inf_nan=False)
    step_id: str | None = None
    tool_call_id: str | None = None
    response_id: str | None = None
    label: str | None = None
    source: str = "client"
    confidence: float = Field(1.0, ge=0.0, le=1.0)
    metadata: dict[str, Any] = Field(default_factory=dict)


class SignalsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    signals: list[SignalIn] = Field(min_length=1, max_length=1000)


async def _parse(request: Request, model: type[BaseModel]) -> Any:
    raw = await request.body()
    if len(raw) > _rt(request).config.max_body_bytes:
        raise PayloadTooLarge("request body too large")
    try:
        data = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as err:
        raise InvalidRequest(f"request body is not valid JSON: {err}", code="invalid_json") from None
    try:
        check_depth(data, raw=raw)
        parsed = model.model_validate(data)
        check_storable(parsed)
    except ValidationError as err:
        raise InvalidRequest(f"invalid request: {_reasons(err)}") from None
    except InvalidInput as err:
        raise InvalidRequest(f"invalid request: {err}") from None
    return parsed


async def _capture(rt: ProxyRuntime, record: CaptureRecord) -> None:
    """Spool a record written through the API; 503 when it cannot be (and capture fails closed)."""
    if not await rt.spool_record(record) and rt.fails_closed:
        raise Unavailable("the write could not be recorded (capture storage unavailable)", code="capture_unavailable")


def _reasons(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in err.errors())


@router.post("/v1/sessions", status_code=201)
async def create_session(request: Request) -> Response:
    rt = _rt(request)
    principal = await _principal(request)
    spec: SessionCreate = await _parse(request, SessionCreate)
    harness_version = policy_version = None
    session_id = new_session_id()
    if rt.rewriter is not None:
        # Pin the session's versions now, so the whole run uses one harness and one policy. The id is
        # drawn first: canary assignment buckets sessions by it (without one, every session got the
        # active version and a canary never saw traffic).
        ctx = SessionContext(
            tenant_id=principal.tenant_id,
            agent=spec.agent,
            trajectory_id=session_id,
            session_id=session_id,
            endpoint="chat",
            task_id=spec.task_id,
            task_input=spec.task_input,
            end_user=spec.end_user,
            metadata=spec.metadata,
            call_index=-1,
        )
        result = rt.rewriter.prepare(ctx, {"model": spec.model, "messages": []})
        if inspect.isawaitable(result):
            result = await result
        harness_version, policy_version = result.harness_version, result.policy_version
    try:
        session, key = await asyncio.to_thread(
            rt.sessions.create,
            tenant_id=principal.tenant_id,
            agent=spec.agent,
            task_id=spec.task_id,
            task_input=spec.task_input,
            end_user=spec.end_user,
            metadata=spec.metadata,
            harness_version=harness_version,
            policy_version=policy_version,
            session_id=session_id,
            minted_by=principal.key_id,
        )
    except EvolvableError as err:
        raise Unavailable(f"cannot create the session: {err}") from None
    await _capture(
        rt,
        session.record(spec.task_input, spec.metadata),
    )
    metrics.SESSIONS_STARTED.inc()
    return _json(
        {
            "id": session.id,
            "api_key": key,
            "agent": session.agent,
            "harness_version": harness_version,
            "policy_version": policy_version,
        },
        201,
    )


@router.post("/v1/sessions/{session_id}/steps", status_code=201)
async def add_steps(session_id: str, request: Request) -> Response:
    """One ATDP step (or `{"steps": [...]}`), e.g. an explicitly reported tool call."""
    rt = _rt(request)
    session = await _session(request, session_id)
    raw = await request.body()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise InvalidRequest(f"request body is not valid JSON: {err}", code="invalid_json") from None
    try:
        check_depth(data, raw=raw)
    except InvalidInput as err:
        raise InvalidRequest(f"invalid step: {err}") from None
    items = data.get("steps") if isinstance(data, dict) and "steps" in data else [data]
    if not isinstance(items, list) or not items:
        raise InvalidRequest("expected a step object or {'steps': [...]}")
    steps = []
    for item in items:
        if isinstance(item, dict) and item.get("kind") == "tool_call" and item.get("tool_call_id") and "id" not in item:
            item = {**item, "id": tool_step_id(session.id, item["tool_call_id"])}  # dedupes with the implicit record
        try:
            step = _STEP.validate_python(item)
            check_storable(step, "step")
        except ValidationError as err:
            raise InvalidRequest(f"invalid step: {_reasons(err)}") from None
        except InvalidInput as err:
            raise InvalidRequest(f"invalid step: {err}") from None
        steps.append(step)
    for step in steps:
        step.agent = step.agent or session.agent
    now = time.time()
    for step in steps:
        await _capture(
            rt,
            step_record(session, step, now),
        )
    rt.sessions.touch(session)
    return _json({"step_ids": [s.id for s in steps]}, 201)


@router.post("/v1/sessions/{session_id}/signals", status_code=201)
async def add_signals(session_id: str, request: Request) -> Response:
    rt = _rt(request)
    session = await _session(request, session_id)
    spec: SignalsIn = await _parse(request, SignalsIn)
    needs_lookup = any(s.tool_call_id or s.response_id for s in spec.signals)
    if needs_lookup:
        await rt.flush()
    records = []
    for s in spec.signals:
        if sum(x is not None for x in (s.step_id, s.tool_call_id, s.response_id)) > 1:
            raise InvalidRequest("give at most one of step_id, tool_call_id, response_id")
        step_id = s.step_id
        if s.tool_call_id or s.response_id:
            step_id = await asyncio.to_thread(
                rt.store.find_step, session.id, tool_call_id=s.tool_call_id, response_id=s.response_id
            )
            if step_id is None:
                ref = f"tool_call_id {s.tool_call_id}" if s.tool_call_id else f"response_id {s.response_id}"
                raise ResourceNotFound(f"no step with {ref} in session {session.id}", code="step_not_found")
        signal: dict[str, Any] = {
            "id": new_id("sig"),
            "kind": s.kind.value,
            "value": s.value,
            "step_id": step_id,
            "label": s.label,
            "source": s.source,
            "confidence": s.confidence,
            "created_at": utcnow().isoformat(),
            "metadata": s.metadata,
        }
        records.append(signal)
    for signal in records:
        await _capture(
            rt,
            SignalRecord(
                id=signal["id"],
                trajectory_id=session.id,
                tenant_id=session.tenant_id,
                end_user=session.end_user,
                run_agent=session.agent,
                signal=signal,
            ),
        )
    return _json({"signal_ids": [s["id"] for s in records]}, 201)


async def end_session(
    rt: ProxyRuntime, session: Session, status: str, outcome: float | None, reason: str | None = None
) -> bool:
    """End a session (its key stops working at once) and spool the end record; False if not spooled."""
    await asyncio.to_thread(rt.sessions.end, session, status)
    metrics.SESSIONS_ENDED.labels(status).inc()
    return await rt.spool_record(
        EndRecord(
            id=new_id("end"),
            trajectory_id=session.id,
            session_id=session.id,
            tenant_id=session.tenant_id,
            end_user=session.end_user,
            run_agent=session.agent,
            status=status,
            outcome=outcome,
            reason=reason,
            at=time.time(),
        )
    )


@router.post("/v1/sessions/{session_id}/end")
async def end(session_id: str, request: Request) -> Response:
    rt = _rt(request)
    session = await _session(request, session_id, allow_ended=True)
    spec: SessionEnd = await _parse(request, SessionEnd)
    if spec.status == TrajectoryStatus.running:
        raise InvalidRequest("status must be completed, failed or abandoned")
    if not session.running:
        if session.status == spec.status.value:
            return _json({"id": session.id, "status": session.status})  # the same end again: idempotent
        raise Conflict(f"session {session.id} already ended as {session.status}", code="session_ended")
    if not await end_session(rt, session, spec.status.value, spec.outcome, reason=spec.reason) and rt.fails_closed:
        raise Unavailable("the end could not be recorded (capture storage unavailable)", code="capture_unavailable")
    return _json({"id": session.id, "status": spec.status.value})


@router.get("/v1/trajectories/{trajectory_id}")
async def get_trajectory(trajectory_id: str, request: Request) -> Response:
    rt = _rt(request)
    principal, own = await _caller(request)
    if own is not None and own.id != trajectory_id:  # a session key reads its own run only
        raise ResourceNotFound(f"trajectory {trajectory_id} not found")
    await rt.flush()
    try:
        trajectory = await asyncio.to_thread(rt.store.get_trajectory, trajectory_id, principal.tenant_id)
    except NotFound:
        raise ResourceNotFound(f"trajectory {trajectory_id} not found") from None
    return Response(trajectory.model_dump_json(), media_type="application/json")


@router.get("/v1/trajectories")
async def list_trajectories(
    request: Request,
    agent: str | None = None,
    status: TrajectoryStatus | None = None,
    harness_version: str | None = None,
    policy_version: str | None = None,
    task_id: str | None = None,
    end_user: str | None = None,
    started_after: datetime | None = None,
    started_before: datetime | None = None,
    limit: int = Query(50, ge=1, le=500),
    cursor: str | None = None,
) -> Response:
    rt = _rt(request)
    principal, own = await _caller(request)
    await rt.flush()
    f = TrajectoryFilter(
        tenant_id=principal.tenant_id,
        ids=[own.id] if own is not None else None,
        agent=agent,
        status=status,
        harness_version=harness_version,
        policy_version=policy_version,
        task_id=task_id,
        end_user=end_user,
        started_after=started_after,
        started_before=started_before,
    )
    try:
        page, next_cursor = await asyncio.to_thread(rt.store.list_trajectories, f, limit, cursor)
    except InvalidCursor:
        raise InvalidRequest("invalid cursor", code="invalid_cursor") from None
    return _json({"data": [h.model_dump(mode="json") for h in page], "next_cursor": next_cursor})


@router.get("/v1/models")
async def models(request: Request) -> Response:
    """The upstreams' models plus the configured aliases (an upstream that fails is skipped)."""
    rt = _rt(request)
    await _principal(request)
    seen: dict[str, dict[str, Any]] = {}
    for upstream in rt.config.upstreams:
        try:
            listed = await rt.upstream.get_json(upstream, "/v1/models")
        except EvolvableError:
            continue
        for m in (listed.get("data") if isinstance(listed, dict) else None) or []:
            if isinstance(m, dict) and "id" in m:
                seen.setdefault(m["id"], m)
    for alias in rt.config.models:
        seen.setdefault(alias, {"id": alias, "object": "model", "owned_by": "evolvable"})
    return _json({"object": "list", "data": list(seen.values())})


@router.get("/v1/proxy/status")
async def status(request: Request) -> Response:
    """Capture health: spool position, writer progress, dropped records."""
    rt = _rt(request)
    return _json(rt.status(await _principal(request)))
