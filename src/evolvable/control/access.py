"""Who may read and change what in the control API: one small dependency, so the rules live in one place.

- no key, or an unknown or revoked one: 401;
- a tenant key reads its own tenant only; another tenant's decision, rollout or agent is 404, exactly
  as if it did not exist (no probing for other tenants' ids);
- writes (promote, rollback, approve, register) need an admin key for the object's tenant: 403 otherwise;
- an operator (governance's operator role) sees and changes every tenant; an admin key is its own
  tenant's admin only.

Keys are resolved by governance (`TenantDirectory.authenticate`, the proxy's Authenticator seam):
admin keys stored in the database are honoured like the bootstrap one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import Request

from evolvable.errors import Forbidden, ResourceNotFound, Unauthenticated
from evolvable.proxy.hooks import Authenticator, Principal


@dataclass(frozen=True)
class Access:
    principal: Principal

    @property
    def operator(self) -> bool:
        return self.principal.is_operator

    @property
    def tenant(self) -> str:
        return self.principal.tenant_id

    @property
    def actor(self) -> str:
        return self.principal.key_id or "api"

    def tenant_for(self, requested: str | None) -> str:
        """The tenant a read is about: the caller's own, or (operators only) the one asked for."""
        if requested is None or requested == self.tenant:
            return self.tenant
        if self.operator:
            return requested
        raise ResourceNotFound(f"no tenant {requested!r}")

    def can_read(self, tenant: str) -> bool:
        return self.operator or tenant == self.tenant

    def require_write(self, tenant: str) -> None:
        if not self.can_read(tenant):
            raise ResourceNotFound("not found")
        if not self.principal.is_admin:
            raise Forbidden("this action needs an admin key", code="admin_required")


def bearer(request: Request) -> str | None:
    value = request.headers.get("authorization")
    if value and value.lower().startswith("bearer "):
        return value[7:].strip() or None
    return None


def access_dependency(authenticator: Authenticator) -> Callable[[Request], Awaitable[Access]]:
    """A FastAPI dependency: the caller's `Access`, or a 401 in the API's error shape."""

    async def access(request: Request) -> Access:
        token = bearer(request)
        principal = await asyncio.to_thread(authenticator.authenticate, token) if token else None
        if principal is None:
            raise Unauthenticated("missing or invalid API key")
        return Access(principal)

    return access
