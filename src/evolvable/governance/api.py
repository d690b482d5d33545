"""HTTP API of governance: admin routes (tenants, keys, purge, audit) and tenant-scoped datasets.

`governance_routers(...)` returns FastAPI routers for the proxy's `routers=`; they authenticate the
bearer themselves through the TenantDirectory, so they work on any app. Errors are `HTTPError`s,
rendered OpenAI-style (`{"error": {...}}`) by their `ErrorShapedRoute`. `AuditReadsMiddleware` audits
the proxy's trajectory reads (which the proxy already scopes to the caller's tenant) without touching
its routes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.background import BackgroundTask
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evolvable.errors import (
    EvolvableError,
    Forbidden,
    GovernanceError,
    HTTPError,
    InvalidRequest,
    NotFound,
    ResourceNotFound,
    Unavailable,
)
from evolvable.governance.audit import AuditAction, AuditLog, safe_query_target
from evolvable.governance.curation import DedupMode, QualityConfig
from evolvable.governance.datasets import EXPORT_FORMATS, DatasetCatalog
from evolvable.governance.purge import DerivedEraser, Purger, PurgeRequest, SpoolPurger
from evolvable.governance.redaction import redact_text
from evolvable.governance.tenants import TenantDirectory
from evolvable.http_errors import ErrorShapedRoute, error_response
from evolvable.protocol.models import CaptureMode
from evolvable.proxy.hooks import Principal, Role
from evolvable.store import Store

log = logging.getLogger("evolvable.governance.api")


def _json(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def _guarded(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
    """Governance's boundary: domain and validation failures become 4xx `HTTPError`s, any other error of
    ours a 503 (the routers' `ErrorShapedRoute` renders them); nothing escapes as a 500 with a traceback."""

    @functools.wraps(handler)
    async def run(*args: Any, **kwargs: Any) -> Response:
        try:
            return await handler(*args, **kwargs)
        except HTTPError:
            raise
        except NotFound as err:
            raise ResourceNotFound(str(err)) from err
        except (GovernanceError, ValidationError, ValueError) as err:
            raise InvalidRequest(str(err), code="invalid_request") from err
        except EvolvableError as err:
            log.exception("governance request failed")
            raise _unavailable(f"{type(err).__name__}: {err}", "unavailable") from err

    return run


def _unavailable(message: str, code: str) -> HTTPError:
    """Governance's 503: typed `invalid_request_error`, as its clients have always parsed it."""
    return Unavailable(message, error_type="invalid_request_error", code=code)


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


class _TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    name: str | None = None
    capture: CaptureMode = CaptureMode.full
    agent_capture: dict[str, CaptureMode] = Field(default_factory=dict)
    retention_days: int | None = Field(None, ge=1)
    redact_upstream: bool = False


class _TenantPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    capture: CaptureMode | None = None
    agent_capture: dict[str, CaptureMode] | None = None
    retention_days: int | None = Field(None, ge=1)
    redact_upstream: bool | None = None


class _KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = ""
    is_admin: bool = False
    role: Role | None = None


class _PurgeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tenant_id: str | None = None
    end_user: str | None = None
    trajectory_id: str | None = None
    session_id: str | None = Field(None, description="Alias of trajectory_id: a session is one trajectory.")


class _DatasetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    filter: dict[str, Any] = Field(default_factory=dict)
    dedup: DedupMode = "near"
    quality: list[str] = Field(default_factory=list)


async def _body(request: Request, model: type[BaseModel]) -> Any:
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as err:
        reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in err.errors())
        raise InvalidRequest(f"invalid request: {reasons}", code="invalid_request") from None


def governance_routers(
    store: Store,
    directory: TenantDirectory,
    *,
    catalog: DatasetCatalog | None = None,
    purger: Purger | None = None,
    audit: AuditLog | None = None,
    spool_purger: SpoolPurger | None = None,
    erasers: Sequence[DerivedEraser] = (),
) -> list[APIRouter]:
    """The admin router (`/v1/admin/...`, admin keys only) and the datasets router (`/v1/datasets`, any key).

    Without `spool_purger` a purge uses the running proxy's spool (`request.app.state.proxy`) when mounted on it."""
    audit = audit or directory.audit
    catalog = catalog or DatasetCatalog(store, audit=audit)
    base_purger = purger or Purger(store, audit=audit, spool_purger=spool_purger, erasers=erasers)
    access = _Access(directory)
    admin = APIRouter(prefix="/v1/admin", tags=["governance-admin"], route_class=ErrorShapedRoute)
    _tenant_routes(admin, access, directory)
    _purge_and_audit_routes(admin, access, store, catalog, audit, base_purger)
    return [admin, _datasets_router(access, catalog)]


class _Access:
    """Who calls (from the bearer) and what they may administer."""

    def __init__(self, directory: TenantDirectory) -> None:
        self.directory = directory

    async def principal(self, request: Request, *, admin: bool = False) -> Principal:
        principal = await asyncio.to_thread(self.directory.authenticate, _bearer(request))
        if principal is None:
            raise HTTPError("missing or invalid API key", status=401, code="invalid_api_key")
        if admin and not principal.is_admin:
            raise Forbidden("this route needs an admin key", code="admin_required")
        return principal

    @staticmethod
    def administer(p: Principal, tenant_id: str | None) -> None:
        """Admins administer their own tenant only; operators every tenant (and cross-tenant scopes)."""
        if not p.may_administer(tenant_id):
            raise Forbidden("an admin key administers its own tenant only", code="tenant_forbidden")


def _actor(p: Principal) -> str:
    return p.key_id or "anonymous"


def _tenant_routes(admin: APIRouter, access: _Access, directory: TenantDirectory) -> None:
    """Tenants and their API keys."""

    @admin.post("/tenants")
    @_guarded
    async def create_tenant(request: Request) -> Response:
        p = await access.principal(request, admin=True)
        spec = await _body(request, _TenantIn)
        if not p.is_operator:
            raise Forbidden("creating tenants needs an operator key", code="operator_required")
        fields = spec.model_dump(exclude={"id"})
        tenant = await asyncio.to_thread(directory.create_tenant, spec.id, actor=_actor(p), **fields)
        return _json(tenant.model_dump(mode="json"), 201)

    @admin.get("/tenants")
    @_guarded
    async def list_tenants(request: Request) -> Response:
        p = await access.principal(request, admin=True)
        tenants = await asyncio.to_thread(directory.list_tenants)
        tenants = [t for t in tenants if p.may_administer(t.id)]
        return _json({"data": [t.model_dump(mode="json") for t in tenants]})

    @admin.patch("/tenants/{tenant_id}")
    @_guarded
    async def update_tenant(tenant_id: str, request: Request) -> Response:
        p = await access.principal(request, admin=True)
        access.administer(p, tenant_id)
        spec = await _body(request, _TenantPatch)
        changes = spec.model_dump(exclude_unset=True)
        tenant = await asyncio.to_thread(
            functools.partial(directory.update_tenant, tenant_id, actor=_actor(p), **changes)
        )
        return _json(tenant.model_dump(mode="json"))

    @admin.post("/tenants/{tenant_id}/keys")
    @_guarded
    async def issue_key(tenant_id: str, request: Request) -> Response:
        p = await access.principal(request, admin=True)
        access.administer(p, tenant_id)
        spec = await _body(request, _KeyIn)
        if spec.role == Role.operator and not p.is_operator:
            raise Forbidden("only an operator issues operator keys", code="operator_required")
        issued = await asyncio.to_thread(
            functools.partial(
                directory.issue_key,
                tenant_id,
                label=spec.label,
                is_admin=spec.is_admin,
                role=spec.role,
                actor=_actor(p),
            )
        )
        return _json(issued.model_dump(mode="json"), 201)

    @admin.get("/tenants/{tenant_id}/keys")
    @_guarded
    async def list_keys(tenant_id: str, request: Request) -> Response:
        access.administer(await access.principal(request, admin=True), tenant_id)
        keys = await asyncio.to_thread(directory.list_keys, tenant_id)
        return _json({"data": [k.model_dump(mode="json") for k in keys]})

    @admin.delete("/tenants/{tenant_id}/keys/{key_id}")
    @_guarded
    async def revoke_key(tenant_id: str, key_id: str, request: Request) -> Response:
        p = await access.principal(request, admin=True)
        access.administer(p, tenant_id)
        info = await asyncio.to_thread(
            functools.partial(directory.revoke_key, key_id, actor=_actor(p), tenant_id=tenant_id)
        )
        return _json(info.model_dump(mode="json"))


def _purge_and_audit_routes(
    admin: APIRouter, access: _Access, store: Store, catalog: DatasetCatalog, audit: AuditLog, base_purger: Purger
) -> None:
    """Erasure (store, spool, derived data) and the audit log."""

    @admin.post("/purge")
    @_guarded
    async def purge(request: Request) -> Response:
        p = await access.principal(request, admin=True)
        spec = await _body(request, _PurgeIn)
        # An admin's purge is confined to its tenant (also a purge by end user or trajectory).
        tenant_id = spec.tenant_id if p.is_operator else (spec.tenant_id or p.tenant_id)
        access.administer(p, tenant_id)
        req = PurgeRequest(
            tenant_id=tenant_id, end_user=spec.end_user, trajectory_id=spec.trajectory_id or spec.session_id
        )
        use = base_purger
        runtime = getattr(request.app.state, "proxy", None)
        if base_purger.spool_purger is None and runtime is not None and hasattr(runtime, "purge_spool"):
            # The running proxy's spool: its records are parsed dicts there.
            use = Purger(store, audit=audit, spool_purger=runtime.purge_spool, erasers=base_purger.erasers)
        report = await asyncio.to_thread(functools.partial(use.purge, req, actor=_actor(p)))
        return _json(report.model_dump(mode="json"))

    @admin.get("/audit")
    @_guarded
    async def audit_entries(
        request: Request,
        tenant_id: str | None = None,
        action: AuditAction | None = None,
        since: datetime | None = None,
        limit: int = Query(200, ge=1, le=10_000),
    ) -> Response:
        p = await access.principal(request, admin=True)
        tenant_id = tenant_id if p.is_operator else (tenant_id or p.tenant_id)
        access.administer(p, tenant_id)
        entries = await asyncio.to_thread(
            functools.partial(audit.query, tenant_id=tenant_id, action=action, since=since, limit=limit)
        )
        return _json({"data": [e.model_dump(mode="json") for e in entries]})


def _datasets_router(access: _Access, catalog: DatasetCatalog) -> APIRouter:
    """Tenant-scoped dataset snapshots: create, list, read, export."""
    data = APIRouter(prefix="/v1/datasets", tags=["governance-datasets"], route_class=ErrorShapedRoute)

    @data.post("")
    @_guarded
    async def create_dataset(request: Request) -> Response:
        p = await access.principal(request)
        spec = await _body(request, _DatasetIn)
        quality = QualityConfig.parse(spec.quality)
        info = await asyncio.to_thread(
            functools.partial(
                catalog.create,
                spec.name,
                filter=spec.filter,
                tenant_id=p.tenant_id,
                quality=quality,
                dedup=spec.dedup,
                actor=_actor(p),
            )
        )
        return _json(info.model_dump(mode="json"), 201)

    @data.get("")
    @_guarded
    async def list_datasets(request: Request) -> Response:
        p = await access.principal(request)
        infos = await asyncio.to_thread(catalog.list, p.tenant_id)
        return _json({"data": [i.model_dump(mode="json") for i in infos]})

    @data.get("/{ref}")
    @_guarded
    async def get_dataset(ref: str, request: Request) -> Response:
        p = await access.principal(request)
        info = await asyncio.to_thread(functools.partial(catalog.get, ref, tenant_id=p.tenant_id))
        return _json(info.model_dump(mode="json"))

    @data.get("/{ref}/export")
    @_guarded
    async def export_dataset(ref: str, request: Request, format: str = "atdp") -> Response:
        p = await access.principal(request)
        if format not in EXPORT_FORMATS:
            raise InvalidRequest(
                f"unknown format {format!r}: use one of {', '.join(EXPORT_FORMATS)}", code="invalid_format"
            )
        workdir = Path(tempfile.mkdtemp(prefix="evolvable-export-"))
        suffix = "parquet" if format == "parquet" else "jsonl"
        target = workdir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', ref)}.{format}.{suffix}"
        try:
            result = await asyncio.to_thread(
                functools.partial(catalog.export, ref, format, target, tenant_id=p.tenant_id, actor=_actor(p))
            )
        except BaseException:
            _remove_tree(workdir)
            raise
        media = "application/vnd.apache.parquet" if format == "parquet" else "application/x-ndjson"
        return FileResponse(
            result.path,
            media_type=media,
            filename=target.name,
            headers={"x-evolvable-records": str(result.records)},
            background=BackgroundTask(_remove_tree, workdir),
        )

    return data


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


_TRAJECTORY_READ = re.compile(r"^/v1/(?:trajectories(?:/(?P<id>[^/]+))?|dashboard/runs/(?P<run>[^/]+))/?$")


class AuditReadsMiddleware:
    """Pure ASGI: writes a `read` audit entry for every successful GET of /v1/trajectories[/{id}].

    Mount with `app.add_middleware(AuditReadsMiddleware, directory=directory)` after `create_app`."""

    def __init__(self, app: ASGIApp, directory: TenantDirectory, audit: AuditLog | None = None) -> None:
        self.app, self.directory = app, directory
        self.audit = audit or directory.audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _TRAJECTORY_READ.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        query = scope.get("query_string", b"").decode()[:300]
        read_id = match["id"] or match["run"]
        target = f"trajectory:{redact_text(read_id)}" if read_id else f"trajectories?{safe_query_target(query)}"
        refused = False

        async def audited_send(message: Message) -> None:
            # The entry is written before the first byte of a successful read leaves: no audit, no read.
            nonlocal refused
            if refused:
                return
            if message["type"] == "http.response.start" and 200 <= message["status"] < 300:
                try:
                    await asyncio.to_thread(self._record, bearer, target)
                except Exception:
                    log.exception("auditing a trajectory read failed; refusing the read")
                    refused = True
                    error = error_response(
                        _unavailable("the read could not be audited; try again", "audit_unavailable")
                    )
                    await error(scope, receive, send)
                    return
            await send(message)

        await self.app(scope, receive, audited_send)

    def _record(self, bearer: str | None, target: str) -> None:
        principal = self.directory.authenticate(bearer)
        actor = principal.key_id if principal and principal.key_id else ("session-key" if bearer else "anonymous")
        tenant = principal.tenant_id if principal else None
        self.audit.record(AuditAction.read, actor=actor or "anonymous", tenant_id=tenant, target=target)
