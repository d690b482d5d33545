"""The proxy's three seams. Governance plugs in an Authenticator and a Governor; the control plane
plugs in a RequestRewriter. The defaults below are what the proxy does without them.

    Authenticator.authenticate(bearer) -> Principal | None      who is calling (None: 401)
    Governor.govern(events, runs) -> events                     spool -> store; must fail closed
      .govern_documents(runs) -> runs | None each              optional: finished runs as documents
    RequestRewriter.prepare(ctx, body) -> RewriteResult         harness + routing for one call

`prepare` may be a plain or an async method; the proxy awaits the result when it is awaitable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from evolvable.protocol.models import Event, RunCapture

if TYPE_CHECKING:
    from evolvable.store import RunDocuments


class Role(StrEnum):
    """What a caller may do. Each role includes the ones below it, within its scope."""

    operator = "operator"
    """Runs the deployment: administers every tenant (EVOLVABLE_ADMIN_KEY, or an operator key)."""
    admin = "admin"
    """Administers its own tenant only: its keys, policy, purges, audit, dead letters."""
    tenant = "tenant"
    """An ordinary API key: calls, sessions and reads in its tenant."""
    session = "session"
    """A session key: one run, until it ends or the key that created it is revoked."""


@dataclass(frozen=True)
class Principal:
    """An authenticated caller, resolved per request. Every read and write is scoped to its tenant.

    `role` decides what it may administer (`may_administer`); `is_admin` is kept in step with it
    (True for admin and operator) for callers written before roles existed."""

    tenant_id: str = "default"
    key_id: str | None = None
    is_admin: bool = False
    role: Role = Role.tenant
    session_id: str | None = None
    """The session a session key belongs to (role `session` only)."""

    def __post_init__(self) -> None:
        if self.is_admin and self.role in (Role.tenant, Role.session):
            object.__setattr__(self, "role", Role.admin)
        object.__setattr__(self, "is_admin", self.role in (Role.admin, Role.operator))

    @property
    def is_operator(self) -> bool:
        return self.role == Role.operator

    def may_administer(self, tenant_id: str | None) -> bool:
        """An operator administers every tenant (and cross-tenant scopes, `None`); an admin only its own."""
        if self.role == Role.operator:
            return True
        return self.role == Role.admin and tenant_id == self.tenant_id


@runtime_checkable
class Authenticator(Protocol):
    def authenticate(self, bearer: str | None) -> Principal | None: ...


@runtime_checkable
class Governor(Protocol):
    def govern(self, events: list[Event], runs: Mapping[str, RunCapture] | None = None) -> list[Event]:
        """The events to store. `runs`: each trajectory's run as the caller knows it (its capture records
        name it), so a governor never reads back a header the writer wrote in an earlier batch."""
        ...


@runtime_checkable
class DocumentGovernor(Protocol):
    """A Governor that also governs finished runs given as documents (`store.RunDocuments`), which spares the
    capture writer building events for its common record (`proxy.call_documents`)."""

    def govern_documents(self, runs: Sequence[RunDocuments]) -> list[RunDocuments | None]:
        """Each run governed (in place) as `govern` would govern its events, or None where the caller must hand
        over its events instead."""
        ...


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

    def govern(self, events: list[Event], runs: Mapping[str, RunCapture] | None = None) -> list[Event]:
        return events

    def govern_documents(self, runs: Sequence[RunDocuments]) -> list[RunDocuments | None]:
        return list(runs)


class NoOpRewriter:
    """Sends requests as the agent wrote them."""

    def prepare(self, ctx: SessionContext, body: dict[str, Any]) -> RewriteResult:
        return RewriteResult(body=body)
