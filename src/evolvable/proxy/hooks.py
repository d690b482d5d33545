"""The proxy's three seams. Governance plugs in an Authenticator and a Governor; the control plane
plugs in a RequestRewriter. The defaults below are what the proxy does without them.

    Authenticator.authenticate(bearer) -> Principal | None      who is calling (None: 401)
    Governor.govern(events) -> events                           spool -> store; must fail closed
    RequestRewriter.prepare(ctx, body) -> RewriteResult         harness + routing for one call

`prepare` may be a plain or an async method; the proxy awaits the result when it is awaitable.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from evolvable.protocol.models import Event


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. Every read and write is scoped to its tenant."""

    tenant_id: str = "default"
    key_id: str | None = None
    is_admin: bool = False


@runtime_checkable
class Authenticator(Protocol):
    def authenticate(self, bearer: str | None) -> Principal | None: ...


@runtime_checkable
class Governor(Protocol):
    def govern(self, events: list[Event]) -> list[Event]: ...


@dataclass
class SessionContext:
    """What the rewriter knows about the call it prepares."""

    tenant_id: str
    agent: str
    trajectory_id: str
    session_id: str | None
    """None for a call without a session (a one-step trajectory)."""
    endpoint: str
    """`chat` or `completions`."""
    task_id: str | None = None
    task_input: Any = None
    end_user: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    harness_version: str | None = None
    """Pinned for the session after its first call (a session never switches versions mid-run)."""
    policy_version: str | None = None
    call_index: int = 0


@dataclass
class RewriteResult:
    body: dict[str, Any]
    harness_version: str | None = None
    policy_version: str | None = None
    upstream_name: str | None = None
    """None: the upstream the model alias (or the default) names."""
    model: str | None = None
    """The model name to send upstream (e.g. a LoRA adapter name); None keeps body['model']."""


@runtime_checkable
class RequestRewriter(Protocol):
    def prepare(self, ctx: SessionContext, body: dict[str, Any]) -> RewriteResult | Awaitable[RewriteResult]: ...


class OpenAuthenticator:
    """No authentication: every caller is the tenant `default`. For a single-tenant, local proxy."""

    def __init__(self, tenant_id: str = "default") -> None:
        self._principal = Principal(tenant_id=tenant_id)

    def authenticate(self, bearer: str | None) -> Principal | None:
        return self._principal


class PassThroughGovernor:
    """Stores events as captured. Governance replaces it with redaction, consent and tenant policy."""

    def govern(self, events: list[Event]) -> list[Event]:
        return events


class NoOpRewriter:
    """Sends requests as the agent wrote them."""

    def prepare(self, ctx: SessionContext, body: dict[str, Any]) -> RewriteResult:
        return RewriteResult(body=body)
