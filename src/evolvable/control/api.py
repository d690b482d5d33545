"""The control plane over HTTP, mounted into the proxy with `create_app(..., routers=[...])`.

    GET  /v1/agents/{name}/harness                 the harness an agent should apply (sticky per session)
    GET  /v1/control/status                        active and canary versions, statistics at a glance
    GET  /v1/control/decisions                     decision records with lever, state and verdict
    POST /v1/control/rollouts/{id}/promote|rollback
    POST /v1/control/decisions/{id}/approve

`create_control_router(..., tick_interval_s=30)` also runs `ControlPlane.run_background` for the
app's lifetime, which is how `evolvable serve` hosts the control plane:

    router = HarnessRouter(store.engine)
    plane = ControlPlane(store, router=router)
    app = create_app(config, store, rewriter=router,
                     routers=[create_control_router(plane, router, admin_key=key, tick_interval_s=30)])

Mounted on the proxy, every route needs a key the proxy's authenticator accepts (401 otherwise); a
tenant key sees only agents whose recorded runs are all its tenant's (`store.tenancy`). Mutating
endpoints need an admin key: `admin_key`, or any key the authenticator marks admin; without either
configured (a local, keyless proxy) they are open. `on_action(actor, action, target)` is called after
each successful mutation (`evolvable serve` writes it to the audit log).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse

from evolvable.control.models import VersionKind, VersionState
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlPlane
from evolvable.errors import ControlError, NotFound
from evolvable.proxy.hooks import Principal
from evolvable.store.tenancy import agents_owned_by

_LOCAL = Principal(is_admin=True)
"""The caller when the router is mounted without a proxy (embedded use, tests): trusted as before."""


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": code}}, status)


def create_control_router(
    plane: ControlPlane,
    harness_router: HarnessRouter | None = None,
    *,
    admin_key: str | None = None,
    tick_interval_s: float | None = None,
    on_action: Callable[[str, str, str], None] | None = None,
) -> APIRouter:
    """The control API. With `tick_interval_s`, the app's lifespan also runs the control plane in the
    background (one leader across replicas) and keeps the harness router's snapshot fresh."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        if harness_router is not None:
            await asyncio.to_thread(harness_router.start)
        stop = asyncio.Event()
        task = asyncio.create_task(plane.run_background(tick_interval_s, stop)) if tick_interval_s else None
        try:
            yield
        finally:
            stop.set()
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if harness_router is not None:
                harness_router.stop()

    api = APIRouter(lifespan=lifespan)

    async def caller(request: Request) -> tuple[Principal | None, bool]:
        """(principal, keys required): None is an unknown key; without a proxy every caller is trusted."""
        runtime = getattr(request.app.state, "proxy", None)
        if runtime is None:
            return _LOCAL, False
        auth = request.headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        principal = await runtime.authenticate(bearer)
        if runtime.authenticator_is_open:
            return Principal(tenant_id=principal.tenant_id if principal else "default", is_admin=True), False
        return principal, await runtime.authenticate(None) is None

    async def visible(request: Request, agent: str | None) -> tuple[JSONResponse | None, set[str] | None]:
        """(error, agents the caller may see; None = all)."""
        principal, _ = await caller(request)
        if principal is None:
            return _error(401, "missing or invalid API key", "invalid_api_key"), None
        if principal.is_admin:
            return None, None
        owned = await asyncio.to_thread(agents_owned_by, plane.store.engine, principal.tenant_id)
        if agent is not None and agent not in owned:
            return _error(404, f"no agent {agent!r}", "not_found"), None
        return None, owned

    async def forbidden(request: Request, authorization: str | None) -> tuple[JSONResponse | None, str]:
        """(refusal, actor) for a mutating call."""
        principal, keys_required = await caller(request)
        if admin_key is not None and authorization == f"Bearer {admin_key}":
            return None, (principal.key_id if principal is not None and principal.key_id else "api")
        if principal is not None and principal.is_admin and (keys_required or admin_key is None):
            return None, principal.key_id or "api"
        if admin_key is None and not keys_required and principal is not None:
            return None, "api"
        if principal is None and keys_required:
            return _error(401, "missing or invalid API key", "invalid_api_key"), ""
        return _error(403, "this action needs the admin key", "forbidden"), ""

    async def act(fn: Any, target: str, action: str, actor: str) -> Any:
        result = await guarded(fn, target, actor=actor)
        if on_action is not None and not isinstance(result, JSONResponse):
            await asyncio.to_thread(on_action, actor, action, target)
        return result

    async def guarded(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = await asyncio.to_thread(fn, *args, **kwargs)
        except NotFound as err:
            return _error(404, str(err), "not_found")
        except ControlError as err:
            return _error(409, str(err), "conflict")
        return result.model_dump(mode="json") if hasattr(result, "model_dump") else result

    @api.get("/v1/agents/{name}/harness")
    async def get_harness(name: str, request: Request, session: str | None = None) -> Any:
        refused, _ = await visible(request, name)
        if refused is not None:
            return refused
        if harness_router is not None:
            harness, version = harness_router.harness_for(name, session)
        else:
            record = plane.registry.current(name, VersionKind.harness, VersionState.active)
            harness, version = (record.harness(), record.id) if record else (None, None)
        if harness is None:
            return _error(404, f"agent {name!r} has no active harness", "not_found")
        return {"agent": name, "harness_version": version, "harness": harness.model_dump(mode="json")}

    @api.get("/v1/control/status")
    async def status(request: Request, agent: str | None = None) -> Any:
        refused, agents = await visible(request, agent)
        if refused is not None:
            return refused
        found = await guarded(plane.status, agent)
        if agents is None or isinstance(found, JSONResponse):
            return found
        return {name: value for name, value in found.items() if name in agents}

    @api.get("/v1/control/decisions")
    async def decisions(request: Request, agent: str | None = None, limit: int = 50) -> Any:
        refused, agents = await visible(request, agent)
        if refused is not None:
            return refused
        found = await asyncio.to_thread(plane.journal.decisions, agent, None, max(1, min(limit, 500)))
        return {"data": [d.model_dump(mode="json") for d in found if agents is None or d.agent in agents]}

    @api.post("/v1/control/rollouts/{rollout_id}/promote")
    async def promote(rollout_id: str, request: Request, authorization: str | None = Header(None)) -> Any:
        refused, actor = await forbidden(request, authorization)
        return refused or await act(plane.promote, rollout_id, "promote", actor)

    @api.post("/v1/control/rollouts/{rollout_id}/rollback")
    async def rollback(rollout_id: str, request: Request, authorization: str | None = Header(None)) -> Any:
        refused, actor = await forbidden(request, authorization)
        return refused or await act(plane.rollback, rollout_id, "rollback", actor)

    @api.post("/v1/control/decisions/{decision_id}/approve")
    async def approve(decision_id: str, request: Request, authorization: str | None = Header(None)) -> Any:
        refused, actor = await forbidden(request, authorization)
        return refused or await act(plane.approve, decision_id, "approve", actor)

    return api
