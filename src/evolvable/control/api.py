"""The control plane over HTTP, mounted into the proxy with `create_app(..., routers=[...])`.

    GET  /v1/agents/{name}/harness                 the harness an agent should apply (sticky per session)
    POST /v1/agents/{name}/harness                 register a harness version (admin; ?activate=true)
    GET  /v1/control/status                        active and canary versions, statistics at a glance
    GET  /v1/control/decisions[/{id}]              decision records with lever, state and verdict
    GET  /v1/control/rollouts/{id}
    POST /v1/control/rollouts/{id}/promote|rollback   (admin)
    POST /v1/control/decisions/{id}/approve            (admin)
    POST /v1/control/tick                              (admin) one control cycle now, if this replica leads

Every route needs a key (`Authorization: Bearer ...`); a tenant key sees its own tenant only and
another tenant's objects are 404 (control/access.py). `create_control_router(..., tick_interval_s=30)`
also runs the control planes in the background for the app's lifetime (one leader across replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError

from evolvable.control.access import Access, access_dependency
from evolvable.control.journal import Journal
from evolvable.control.models import VersionKind, VersionState
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlPlane
from evolvable.control.tenancy import ControlPlanes
from evolvable.errors import Conflict, ControlError, InvalidRequest, NotFound, ResourceNotFound
from evolvable.http_errors import ErrorShapedRoute
from evolvable.protocol.harness import Harness
from evolvable.proxy.hooks import Authenticator


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a blocking control call off the event loop; its errors become 404 / 409 in the API's shape."""
    try:
        result = await asyncio.to_thread(fn, *args, **kwargs)
    except NotFound as err:
        raise ResourceNotFound(str(err)) from None
    except ControlError as err:
        raise Conflict(str(err), code="conflict") from None
    return result.model_dump(mode="json") if hasattr(result, "model_dump") else result


def create_control_router(
    planes: ControlPlanes | ControlPlane,
    harness_router: HarnessRouter | None = None,
    *,
    authenticator: Authenticator,
    tick_interval_s: float | None = None,
    on_action: Callable[[str, str, str], None] | None = None,
) -> APIRouter:
    """The control API, authenticated by `authenticator` (governance's key directory). With `tick_interval_s`,
    the app's lifespan also ticks the control planes in the background and keeps the router's snapshot fresh.
    `on_action(actor, action, target)` is called after each successful promote, rollback or approve
    (`evolvable serve` writes it to the audit log)."""
    if isinstance(planes, ControlPlane):
        planes = ControlPlanes.single(planes)
    api = APIRouter(lifespan=_lifespan(planes, harness_router, tick_interval_s), route_class=ErrorShapedRoute)
    caller = Depends(access_dependency(authenticator))
    _harness_routes(api, planes, harness_router, caller)
    _control_routes(api, planes, caller, on_action)
    return api


def _lifespan(
    planes: ControlPlanes, harness_router: HarnessRouter | None, tick_interval_s: float | None
) -> Callable[[Any], contextlib.AbstractAsyncContextManager[None]]:
    """Start the harness router's snapshot and (with `tick_interval_s`) the background ticks with the app."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        if harness_router is not None:
            await asyncio.to_thread(harness_router.start)
        stop = asyncio.Event()
        task = asyncio.create_task(planes.run_background(tick_interval_s, stop)) if tick_interval_s else None
        try:
            yield
        finally:
            stop.set()
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if harness_router is not None:
                harness_router.stop()

    return lifespan


def _harness_routes(api: APIRouter, planes: ControlPlanes, harness_router: HarnessRouter | None, caller: Any) -> None:
    """An agent's active harness (what its sessions get), and registering a new one."""

    @api.get("/v1/agents/{name}/harness")
    async def get_harness(
        name: str, session: str | None = None, tenant: str | None = None, access: Access = caller
    ) -> Any:
        scope = access.tenant_for(tenant)
        if harness_router is not None:
            harness, version = harness_router.harness_for(name, session, scope)
        else:
            record = planes.plane(scope).registry.current(name, VersionKind.harness, VersionState.active)
            harness, version = (record.harness(), record.id) if record else (None, None)
        if harness is None:
            raise ResourceNotFound(f"agent {name!r} has no active harness")
        return {"agent": name, "tenant": scope, "harness_version": version, "harness": harness.model_dump(mode="json")}

    @api.post("/v1/agents/{name}/harness")
    async def register_harness(
        name: str, request: Request, activate: bool = False, tenant: str | None = None, access: Access = caller
    ) -> Any:
        scope = access.tenant_for(tenant)
        access.require_write(scope)
        try:
            harness = Harness.model_validate_json(await request.body())
        except ValidationError as err:
            raise InvalidRequest(f"invalid harness: {err.errors()[0]['msg']}") from None
        if harness.agent != name:
            raise InvalidRequest(f"harness is for agent {harness.agent!r}, not {name!r}")
        state = VersionState.active if activate else VersionState.candidate
        registry = planes.plane(scope).registry
        record = await _call(registry.register_harness, harness, state=state, note="api", created_by=access.actor)
        if harness_router is not None:
            await asyncio.to_thread(harness_router.refresh)
        return record


def _control_routes(
    api: APIRouter, planes: ControlPlanes, caller: Any, on_action: Callable[[str, str, str], None] | None
) -> None:
    """The control plane's status, decisions and rollouts, and the operator's actions on them."""

    def owner(kind: str, object_id: str, access: Access) -> ControlPlane:
        """The plane of the tenant that owns a decision or rollout, if the caller may see it; else 404."""
        every_tenant = Journal(planes.plane(access.tenant).store.engine, tenant=None)
        try:
            record = every_tenant.decision(object_id) if kind == "decision" else every_tenant.rollout(object_id)
        except NotFound:
            raise ResourceNotFound(f"no {kind} {object_id!r}") from None
        if not access.can_read(record.tenant):
            raise ResourceNotFound(f"no {kind} {object_id!r}")
        return planes.plane(record.tenant)

    async def acted(result: Any, access: Access, action: str, target: str) -> Any:
        if on_action is not None:
            await asyncio.to_thread(on_action, access.actor, action, target)
        return result

    @api.get("/v1/control/status")
    async def status(agent: str | None = None, tenant: str | None = None, access: Access = caller) -> Any:
        return await _call(planes.plane(access.tenant_for(tenant)).status, agent)

    @api.get("/v1/control/decisions")
    async def decisions(
        agent: str | None = None, tenant: str | None = None, limit: int = 50, access: Access = caller
    ) -> Any:
        journal = planes.plane(access.tenant_for(tenant)).journal
        found = await asyncio.to_thread(journal.decisions, agent, None, max(1, min(limit, 500)))
        return {"data": [d.model_dump(mode="json") for d in found]}

    @api.get("/v1/control/decisions/{decision_id}")
    async def decision(decision_id: str, access: Access = caller) -> Any:
        return await _call(owner("decision", decision_id, access).journal.decision, decision_id)

    @api.get("/v1/control/rollouts/{rollout_id}")
    async def rollout(rollout_id: str, access: Access = caller) -> Any:
        return await _call(owner("rollout", rollout_id, access).journal.rollout, rollout_id)

    @api.post("/v1/control/rollouts/{rollout_id}/promote")
    async def promote(rollout_id: str, access: Access = caller) -> Any:
        plane = owner("rollout", rollout_id, access)
        access.require_write(plane.tenant)
        return await acted(await _call(plane.promote, rollout_id, actor=access.actor), access, "promote", rollout_id)

    @api.post("/v1/control/rollouts/{rollout_id}/rollback")
    async def rollback(rollout_id: str, access: Access = caller) -> Any:
        plane = owner("rollout", rollout_id, access)
        access.require_write(plane.tenant)
        return await acted(await _call(plane.rollback, rollout_id, actor=access.actor), access, "rollback", rollout_id)

    @api.post("/v1/control/decisions/{decision_id}/approve")
    async def approve(decision_id: str, access: Access = caller) -> Any:
        plane = owner("decision", decision_id, access)
        access.require_write(plane.tenant)
        return await acted(await _call(plane.approve, decision_id, actor=access.actor), access, "approve", decision_id)

    @api.post("/v1/control/tick")
    async def tick(tenant: str | None = None, agent: str | None = None, access: Access = caller) -> Any:
        scope = access.tenant_for(tenant) if tenant or not access.operator else None
        access.require_write(scope or access.tenant)
        report = await asyncio.to_thread(planes.tick, scope, agent)
        return {"leader": report.leader, "actions": report.actions, "decisions": report.decisions}
