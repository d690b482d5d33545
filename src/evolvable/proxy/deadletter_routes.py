"""Admin API of the quarantine: `/v1/proxy/deadletter` lists, replays and discards records the writer
could not apply. Operators see every tenant's entries, an admin its own tenant's; without an
authenticator (a local, single-tenant proxy) the caller is the operator."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response

from evolvable.errors import Forbidden, ResourceNotFound, Unavailable
from evolvable.proxy.deadletter import DeadLetterEntry
from evolvable.proxy.routes import _json, _principal, _rt
from evolvable.proxy.runtime import ProxyRuntime

router = APIRouter(prefix="/v1/proxy/deadletter", tags=["proxy-admin"])


async def _scope(request: Request) -> str | None:
    """The tenant whose entries the caller administers; None for all (an operator)."""
    rt = _rt(request)
    principal = await _principal(request)
    if rt.authenticator_is_open or principal.is_operator:
        return None
    if not principal.is_admin:
        raise Forbidden("the dead-letter queue needs an admin key", code="admin_required")
    return principal.tenant_id


async def _replay(rt: ProxyRuntime, entry: DeadLetterEntry, tenant_id: str | None) -> bool:
    payload = await asyncio.to_thread(rt.deadletter.take, entry.id, tenant_id)
    if payload is None:
        return False
    if not await rt.spool_record_bytes(payload):
        raise Unavailable("the record could not be spooled again", code="capture_unavailable")
    await asyncio.to_thread(rt.deadletter.remove, entry.id)
    return True


@router.get("")
async def list_entries(request: Request) -> Response:
    tenant_id = await _scope(request)
    entries = await asyncio.to_thread(_rt(request).deadletter.entries, tenant_id)
    return _json({"data": [e.as_dict() for e in entries]})


@router.post("/replay")
async def replay_all(request: Request) -> Response:
    """Put every visible entry back into the spool (after the fix that makes them storable)."""
    rt, tenant_id = _rt(request), await _scope(request)
    replayed = [
        e.id for e in await asyncio.to_thread(rt.deadletter.entries, tenant_id) if await _replay(rt, e, tenant_id)
    ]
    return _json({"replayed": replayed})


@router.post("/{entry_id}/replay")
async def replay_one(entry_id: str, request: Request) -> Response:
    rt, tenant_id = _rt(request), await _scope(request)
    entry = next((e for e in await asyncio.to_thread(rt.deadletter.entries, tenant_id) if e.id == entry_id), None)
    if entry is None or not await _replay(rt, entry, tenant_id):
        raise ResourceNotFound(f"dead letter {entry_id} not found")
    return _json({"replayed": [entry_id]})


@router.delete("/{entry_id}")
async def discard(entry_id: str, request: Request) -> Response:
    rt, tenant_id = _rt(request), await _scope(request)
    visible = {e.id for e in await asyncio.to_thread(rt.deadletter.entries, tenant_id)}
    if entry_id not in visible or not await asyncio.to_thread(rt.deadletter.remove, entry_id):
        raise ResourceNotFound(f"dead letter {entry_id} not found")
    return _json({"discarded": entry_id})
