"""Who is calling the dashboard's JSON API, and what they may see.

The caller is whoever the proxy's authenticator says the bearer key is: an admin key sees every tenant
(optionally narrowed with `?tenant=`), a tenant key its own tenant only. Session keys are for agents,
not people, and are refused. Errors use the proxy's OpenAI-style error shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response

from evolvable.errors import Forbidden, Unauthenticated
from evolvable.proxy.hooks import Principal
from evolvable.proxy.sessions import KEY_PREFIX


@dataclass(frozen=True)
class Viewer:
    principal: Principal
    tenant_scope: str | None
    """The tenant every read is limited to; None: all tenants (admin keys only)."""

    @property
    def actor(self) -> str:
        return self.principal.key_id or ("admin" if self.principal.is_admin else "anonymous")


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


async def viewer(request: Request, tenant: str | None = None) -> Viewer:
    """The caller, or a 401. A local proxy without authentication treats every caller as its admin."""
    runtime = request.app.state.proxy
    bearer = _bearer(request)
    if bearer and bearer.startswith(KEY_PREFIX):
        raise Unauthenticated("session keys cannot read the dashboard API")
    principal = await runtime.authenticate(bearer)
    if principal is None:
        raise Unauthenticated("missing or invalid API key")
    if runtime.authenticator_is_open:
        principal = Principal(tenant_id=principal.tenant_id, key_id=principal.key_id, is_admin=True)
    if principal.is_admin:
        return Viewer(principal, tenant)
    return Viewer(principal, principal.tenant_id)


def require_admin(v: Viewer) -> None:
    if not v.principal.is_admin:
        raise Forbidden("this needs an admin key", code="admin_required")


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")
