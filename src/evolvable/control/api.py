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

Mutating endpoints need the admin key (`Authorization: Bearer <admin key>`) when one is configured.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse

from evolvable.control.models import VersionKind, VersionState
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlPlane
from evolvable.errors import ControlError, NotFound


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": code}}, status)


def create_control_router(
    plane: ControlPlane,
    harness_router: HarnessRouter | None = None,
    *,
    admin_key: str | None = None,
    tick_interval_s: float | None = None,
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

    def forbidden(authorization: str | None) -> JSONResponse | None:
        if admin_key is None:
            return None
        if authorization != f"Bearer {admin_key}":
            return _error(403, "this action needs the admin key", "forbidden")
        return None

    async def guarded(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = await asyncio.to_thread(fn, *args, **kwargs)
        except NotFound as err:
            return _error(404, str(err), "not_found")
        except ControlError as err:
            return _error(409, str(err), "conflict")
        return result.model_dump(mode="json") if hasattr(result, "model_dump") else result

    @api.get("/v1/agents/{name}/harness")
    async def get_harness(name: str, session: str | None = None) -> Any:
        if harness_router is not None:
            harness, version = harness_router.harness_for(name, session)
        else:
            record = plane.registry.current(name, VersionKind.harness, VersionState.active)
            harness, version = (record.harness(), record.id) if record else (None, None)
        if harness is None:
            return _error(404, f"agent {name!r} has no active harness", "not_found")
        return {"agent": name, "harness_version": version, "harness": harness.model_dump(mode="json")}

    @api.get("/v1/control/status")
    async def status(agent: str | None = None) -> Any:
        return await guarded(plane.status, agent)

    @api.get("/v1/control/decisions")
    async def decisions(agent: str | None = None, limit: int = 50) -> Any:
        found = await asyncio.to_thread(plane.journal.decisions, agent, None, max(1, min(limit, 500)))
        return {"data": [d.model_dump(mode="json") for d in found]}

    @api.post("/v1/control/rollouts/{rollout_id}/promote")
    async def promote(rollout_id: str, request: Request, authorization: str | None = Header(None)) -> Any:
        return forbidden(authorization) or await guarded(plane.promote, rollout_id, actor="api")

    @api.post("/v1/control/rollouts/{rollout_id}/rollback")
    async def rollback(rollout_id: str, authorization: str | None = Header(None)) -> Any:
        return forbidden(authorization) or await guarded(plane.rollback, rollout_id, actor="api")

    @api.post("/v1/control/decisions/{decision_id}/approve")
    async def approve(decision_id: str, authorization: str | None = Header(None)) -> Any:
        return forbidden(authorization) or await guarded(plane.approve, decision_id, actor="api")

    return api
