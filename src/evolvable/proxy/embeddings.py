"""`POST /v1/embeddings`: passed through to the upstream the model names; usage recorded per session.

Embeddings are not agent decisions, so they do not become `llm_call` steps (ATDP has no embedding
step kind, and no header-update event to count them in the trajectory's metadata mid-run). A call made
in a session (session key, or `x-evolvable-session` with a tenant key) is recorded as a `skill_use`
step named `embeddings` holding the model, the number of inputs, the dimensions and the upstream's
`usage`, never the embedded texts or vectors. A call outside any session passes through unrecorded.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from evolvable.errors import HTTPError, InvalidRequest, PayloadTooLarge, ResourceNotFound, UpstreamError
from evolvable.protocol.models import SkillUseStep
from evolvable.proxy.routes import _caller
from evolvable.proxy.runtime import ProxyRuntime, step_record
from evolvable.proxy.sessions import KEY_PREFIX, Session

router = APIRouter()
EMBEDDINGS_PATH = "/v1/embeddings"


@router.post(EMBEDDINGS_PATH)
@router.post("/embeddings")
async def embeddings(request: Request) -> Response:
    rt: ProxyRuntime = request.app.state.proxy
    principal, session = await _caller(request)
    session = session or await _named_session(rt, request, principal.tenant_id)
    body = _parse(await request.body(), rt.config.max_body_bytes)
    client_model = body["model"]
    alias = rt.config.models.get(client_model)
    try:
        upstream = rt.config.upstream(alias.upstream if alias else None)
    except Exception as err:
        raise InvalidRequest(str(err), code="unknown_upstream") from None
    served = (alias.served_model if alias else None) or client_model
    started = time.perf_counter()
    try:
        response = await rt.upstream.post(
            upstream,
            EMBEDDINGS_PATH,
            orjson.dumps({**body, "model": served}),
            rt.upstream.headers(upstream, _forward(rt, request)),
        )
        try:
            payload, status = await response.read(), response.status
        finally:
            response.release()
    except UpstreamError as err:
        raise HTTPError(str(err), status=err.status_code, error_type=err.error_type) from None
    if session is not None and status == 200:
        step = usage_step(body, payload, served, upstream.name, (time.perf_counter() - started) * 1000)
        await _record(rt, session, step)
    return Response(payload, status, media_type="application/json")


def _parse(raw: bytes, limit: int) -> dict[str, Any]:
    if len(raw) > limit:
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise InvalidRequest(f"request body is not valid JSON: {err}", code="invalid_json") from None
    if not isinstance(body, dict) or not isinstance(body.get("model"), str) or "input" not in body:
        raise InvalidRequest("an embeddings request needs 'model' (a string) and 'input'")
    return body


def _forward(rt: ProxyRuntime, request: Request) -> str | None:
    """The client's bearer goes upstream only on an open proxy and when it is not an Evolvable key."""
    auth = request.headers.get("authorization", "")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    return bearer if rt.authenticator_is_open and bearer and not bearer.startswith(KEY_PREFIX) else None


async def _named_session(rt: ProxyRuntime, request: Request, tenant_id: str) -> Session | None:
    sid = request.headers.get("x-evolvable-session")
    if sid is None:
        return None
    session = rt.sessions.cached_by_id(sid) or await asyncio.to_thread(rt.sessions.load_by_id, sid)
    if session is None or session.tenant_id != tenant_id:
        raise ResourceNotFound(f"session {sid} not found", code="session_not_found")
    return session


def usage_step(body: dict[str, Any], payload: bytes, model: str, upstream: str, latency_ms: float) -> SkillUseStep:
    """What an embeddings call cost: counts and usage, no texts, no vectors."""
    inputs = body["input"]
    try:
        answer = orjson.loads(payload)
    except orjson.JSONDecodeError:
        answer = {}
    data = answer.get("data") if isinstance(answer, dict) else None
    first = data[0].get("embedding") if isinstance(data, list) and data and isinstance(data[0], dict) else None
    return SkillUseStep(
        skill_name="embeddings",
        input={"model": model, "inputs": len(inputs) if isinstance(inputs, list) else 1},
        output={
            "usage": answer.get("usage") if isinstance(answer, dict) else None,
            "embeddings": len(data) if isinstance(data, list) else None,
            "dimensions": len(first) if isinstance(first, list) else None,
        },
        metadata={"endpoint": "embeddings", "upstream": upstream, "latency_ms": round(latency_ms, 3)},
    )


async def _record(rt: ProxyRuntime, session: Session, step: SkillUseStep) -> None:
    step.agent = session.agent
    await rt.spool_record(step_record(session, step, time.time()))
    rt.sessions.touch(session)
