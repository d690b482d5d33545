"""Tenants, their policies, and the API keys that map callers to them.

Keys are 256-bit random strings shown once at issue; only their SHA-256 digest is stored. A slow
password hash (scrypt) buys nothing for keys with that much entropy and would cost every request
tens of milliseconds (measured in docs/governance.md), so verified keys are hashed with SHA-256 and
cached in memory for a short TTL; revoking a key clears this process's cache at once and other
processes within the TTL.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
from datetime import UTC, datetime
from typing import Any, overload

from pydantic import BaseModel, Field, ValidationError

from evolvable.errors import GovernanceError, NotFound
from evolvable.governance.audit import AuditAction, AuditLog
from evolvable.governance.capture import strictest
from evolvable.protocol.models import CaptureMode, utcnow
from evolvable.proxy.hooks import Principal, Role
from evolvable.store import Store
from evolvable.store.engine import Engine
from evolvable.store.repos.tenants import Row, TenantRows, tenant_rows

log = logging.getLogger("evolvable.governance")

KEY_PREFIX = "evk_"
ENV_ADMIN_KEY_ID = "env-admin"
DEFAULT_TENANT = "default"
_TENANT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


class Tenant(BaseModel):
    id: str
    name: str
    capture: CaptureMode = CaptureMode.full
    agent_capture: dict[str, CaptureMode] = Field(default_factory=dict)
    retention_days: int | None = Field(None, ge=1)
    redact_upstream: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def capture_for(self, agent: str | None) -> CaptureMode:
        """The agent's override, else the tenant's mode; for an unknown agent the strictest of all."""
        if agent is None:
            return strictest([self.capture, *self.agent_capture.values()])
        return self.agent_capture.get(agent, self.capture)


class ApiKeyInfo(BaseModel):
    id: str
    tenant_id: str
    label: str
    is_admin: bool
    role: Role
    created_at: datetime
    revoked_at: datetime | None


class IssuedKey(BaseModel):
    """The only time the plaintext key exists outside the caller's hands."""

    key_id: str
    tenant_id: str
    key: str
    is_admin: bool
    label: str
    role: Role = Role.tenant


def role_of(is_admin: bool, role: str | None) -> Role:
    """A stored key's role; keys issued before roles existed have none (admin flag decides)."""
    if role:
        return Role(role)
    return Role.admin if is_admin else Role.tenant


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@overload
def aware(value: datetime) -> datetime: ...
@overload
def aware(value: None) -> None: ...
def aware(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything here is UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _validated(data: dict[str, Any]) -> Tenant:
    try:
        return Tenant.model_validate(data)
    except ValidationError as err:
        reasons = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise GovernanceError(f"invalid tenant policy: {reasons}") from None


_UPDATABLE = {"name", "capture", "agent_capture", "retention_days", "redact_upstream"}


class TenantDirectory:
    """Tenants, policies and keys through the tenant repository; implements the proxy's Authenticator seam.

    `rows` is the repository, or the store's engine (wrapped in the SQL repository; its audit log too)."""

    def __init__(
        self,
        rows: TenantRows | Engine,
        *,
        admin_key: str | None = None,
        cache_ttl_s: float = 30.0,
        audit: AuditLog | None = None,
    ) -> None:
        if audit is None:
            if not isinstance(rows, Engine):
                raise GovernanceError("a TenantDirectory on a repository needs its audit log (`audit=`)")
            audit = AuditLog(rows)
        self.rows = tenant_rows(rows)
        self.audit = audit
        self.cache_ttl_s = cache_ttl_s
        self._admin_hash = hash_key(admin_key) if admin_key else None
        self._keys: dict[str, tuple[float, Principal | None]] = {}
        self._active: dict[str, tuple[float, bool]] = {}
        self._keys_exist: tuple[float, bool] = (0.0, False)
        self.keys_exist_ttl_s = 1.0
        self._keys_exist_refreshing = False
        self._tenants: dict[str, tuple[float, Tenant]] = {}
        self._lock = threading.Lock()

    @property
    def has_admin_key(self) -> bool:
        """Whether an admin key came from the settings (EVOLVABLE_ADMIN_KEY)."""
        return self._admin_hash is not None

    @classmethod
    def from_store(cls, store: Store, **kwargs: Any) -> TenantDirectory:
        if "admin_key" not in kwargs:
            from evolvable.settings import get_settings

            kwargs["admin_key"] = get_settings().admin_key
        return cls(store.engine, **kwargs)

    # ------------------------------------------------------------------ tenants

    def create_tenant(
        self,
        tenant_id: str,
        *,
        name: str | None = None,
        capture: CaptureMode | str = CaptureMode.full,
        agent_capture: dict[str, CaptureMode | str] | None = None,
        retention_days: int | None = None,
        redact_upstream: bool = False,
        actor: str = "cli",
    ) -> Tenant:
        if not _TENANT_ID.match(tenant_id):
            raise GovernanceError(f"invalid tenant id {tenant_id!r}: use letters, digits, '_', '.', '-' (max 200)")
        now = utcnow()
        tenant = _validated(
            {
                "id": tenant_id,
                "name": name or tenant_id,
                "capture": capture,
                "agent_capture": agent_capture or {},
                "retention_days": retention_days,
                "redact_upstream": redact_upstream,
                "created_at": now,
                "updated_at": now,
            }
        )
        entry = self.audit.entry(
            AuditAction.policy_change,
            actor=actor,
            tenant_id=tenant_id,
            target=f"tenant:{tenant_id}",
            details={"created": self._policy(tenant)},
        )
        if not self.rows.insert_tenant(self._row(tenant), entry):
            raise GovernanceError(f"tenant {tenant_id!r} already exists")
        self._forget_tenant(tenant_id)
        return tenant

    def get_tenant(self, tenant_id: str) -> Tenant:
        row = self.rows.tenant(tenant_id)
        if row is None:
            raise NotFound(f"tenant {tenant_id!r} does not exist")
        return self._tenant(row)

    def list_tenants(self) -> list[Tenant]:
        return [self._tenant(r) for r in self.rows.tenants()]

    def update_tenant(self, tenant_id: str, *, actor: str = "cli", **changes: Any) -> Tenant:
        """Change policy fields (name, capture, agent_capture, retention_days, redact_upstream); audited."""
        unknown = set(changes) - _UPDATABLE
        if unknown:
            raise GovernanceError(f"cannot update {sorted(unknown)}; updatable: {sorted(_UPDATABLE)}")
        before = self.get_tenant(tenant_id)
        after = _validated({**before.model_dump(), **changes, "updated_at": utcnow()})
        entry = self.audit.entry(
            AuditAction.policy_change,
            actor=actor,
            tenant_id=tenant_id,
            target=f"tenant:{tenant_id}",
            details={"before": self._policy(before), "after": self._policy(after)},
        )
        self.rows.update_tenant(tenant_id, self._row(after), entry)
        self._forget_tenant(tenant_id)
        return after

    def policy_for(self, tenant_id: str) -> Tenant:
        """The tenant's policy, cached for the TTL; an unregistered tenant gets the default (full, redacted)."""
        now = time.monotonic()
        cached = self._tenants.get(tenant_id)
        if cached and cached[0] > now:
            return cached[1]
        try:
            tenant = self.get_tenant(tenant_id)
        except NotFound:
            tenant = Tenant(id=tenant_id, name=tenant_id)
        self._tenants[tenant_id] = (now + self.cache_ttl_s, tenant)
        return tenant

    def _forget_tenant(self, tenant_id: str) -> None:
        self._tenants.pop(tenant_id, None)

    @staticmethod
    def _policy(t: Tenant) -> dict[str, Any]:
        return t.model_dump(
            mode="json", include={"capture", "agent_capture", "retention_days", "redact_upstream", "name"}
        )

    @staticmethod
    def _row(t: Tenant) -> dict[str, Any]:
        return {
            "id": t.id,
            "name": t.name,
            "capture": t.capture.value,
            "agent_capture": {a: m.value for a, m in t.agent_capture.items()},
            "retention_days": t.retention_days,
            "redact_upstream": t.redact_upstream,
            "created_at": t.created_at,
            "updated_at": t.updated_at,
        }

    @staticmethod
    def _tenant(row: Row) -> Tenant:
        data = dict(row)
        data["created_at"] = aware(data["created_at"])
        data["updated_at"] = aware(data["updated_at"])
        return Tenant.model_validate(data)

    # ------------------------------------------------------------------ keys

    def issue_key(
        self,
        tenant_id: str,
        *,
        label: str = "",
        is_admin: bool = False,
        actor: str = "cli",
        role: Role | str | None = None,
    ) -> IssuedKey:
        """A new key for the tenant. `role` (operator | admin | tenant) wins over `is_admin`; an operator
        key administers every tenant, so only an operator (or the CLI) should issue one."""
        self.get_tenant(tenant_id)  # NotFound for an unknown tenant
        resolved = Role(role) if role is not None else (Role.admin if is_admin else Role.tenant)
        if resolved == Role.session:
            raise GovernanceError("session keys are created by the proxy's /v1/sessions, not issued")
        is_admin = resolved in (Role.admin, Role.operator)
        key_id = f"key_{secrets.token_hex(8)}"  # (random: a prefix of a time-ordered `new_id` would repeat)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        self.rows.insert_key(
            {
                "id": key_id,
                "tenant_id": tenant_id,
                "key_hash": hash_key(key),
                "label": label,
                "is_admin": is_admin,
                "role": resolved.value,
                "created_at": utcnow(),
                "revoked_at": None,
            },
            self.audit.entry(
                AuditAction.key_issued,
                actor=actor,
                tenant_id=tenant_id,
                target=f"key:{key_id}",
                details={"label": label, "is_admin": is_admin, "role": resolved.value},
            ),
        )
        self._keys_exist = (float("inf"), True)
        return IssuedKey(key_id=key_id, tenant_id=tenant_id, key=key, is_admin=is_admin, label=label, role=resolved)

    def revoke_key(self, key_id: str, *, actor: str = "cli", tenant_id: str | None = None) -> ApiKeyInfo:
        """Revoke a key (optionally only if it belongs to `tenant_id`); idempotent."""
        row = self.rows.revoke_key(
            key_id,
            tenant_id,
            utcnow(),
            lambda key: self.audit.entry(
                AuditAction.key_revoked, actor=actor, tenant_id=key["tenant_id"], target=f"key:{key_id}"
            ),
        )
        if row is None:
            raise NotFound(f"key {key_id!r} does not exist")
        with self._lock:
            self._keys = {h: v for h, v in self._keys.items() if v[1] is None or v[1].key_id != key_id}
            self._active[key_id] = (float("inf"), False)
        return self.list_keys(key_id=key_id)[0]

    def list_keys(self, tenant_id: str | None = None, *, key_id: str | None = None) -> list[ApiKeyInfo]:
        return [
            ApiKeyInfo(
                id=r["id"],
                tenant_id=r["tenant_id"],
                label=r["label"],
                is_admin=r["is_admin"],
                role=role_of(bool(r["is_admin"]), r["role"]),
                created_at=aware(r["created_at"]),
                revoked_at=aware(r["revoked_at"]),
            )
            for r in self.rows.keys(tenant_id=tenant_id, key_id=key_id)
        ]

    # ------------------------------------------------------------------ the Authenticator seam

    def authenticate(self, bearer: str | None) -> Principal | None:
        """Map a bearer token to its tenant; None for a missing, unknown or revoked key."""
        if not bearer:
            return None
        if bearer.lower().startswith("bearer "):
            bearer = bearer[7:].strip()
        digest = hash_key(bearer)
        if self._admin_hash is not None and hmac.compare_digest(digest, self._admin_hash):
            return Principal(tenant_id=DEFAULT_TENANT, key_id=ENV_ADMIN_KEY_ID, role=Role.operator)
        if not bearer.startswith(KEY_PREFIX):
            return None
        now = time.monotonic()
        cached = self._keys.get(digest)
        if cached and cached[0] > now:
            return cached[1]
        row = self.rows.key_by_hash(digest)
        principal = (
            Principal(tenant_id=row["tenant_id"], key_id=row["id"], role=role_of(bool(row["is_admin"]), row["role"]))
            if row is not None and row["revoked_at"] is None
            else None
        )
        with self._lock:
            if len(self._keys) >= 10_000:
                self._keys.clear()
            # Misses are cached briefly too, so a flood of bad keys does not become a flood of queries.
            self._keys[digest] = (now + (self.cache_ttl_s if principal else min(self.cache_ttl_s, 2.0)), principal)
        return principal

    def keys_exist(self) -> bool:
        """Whether any API key exists (or EVOLVABLE_ADMIN_KEY is set): from then on every request needs a
        key. Checked per request (cached for `keys_exist_ttl_s`; once true it stays true), so a proxy
        started before the first key starts requiring keys as soon as one is issued anywhere.

        Only the first answer waits for the database. After that an expired answer is refreshed in a
        thread while the caller gets the last one: the request path (the event loop) ran this query
        itself once a second. A key issued elsewhere is thus seen within the TTL plus one query."""
        if self._admin_hash is not None:
            return True
        until, known = self._keys_exist
        if known or until > time.monotonic():
            return known
        if until == 0.0:
            return self._load_keys_exist()
        self._refresh_keys_exist()
        return known

    def _load_keys_exist(self) -> bool:
        found = self.rows.any_key()
        if not self._keys_exist[1]:  # a key issued here meanwhile stays known
            self._keys_exist = (time.monotonic() + self.keys_exist_ttl_s, found)
        return found or self._keys_exist[1]

    def _refresh_keys_exist(self) -> None:
        """One refresh at a time, in a daemon thread; a failed one keeps the last answer for another TTL."""
        with self._lock:
            if self._keys_exist_refreshing:
                return
            self._keys_exist_refreshing = True

        def refresh() -> None:
            try:
                self._load_keys_exist()
            except Exception:
                log.exception("checking whether API keys exist failed; keeping the last answer")
                self._keys_exist = (time.monotonic() + self.keys_exist_ttl_s, self._keys_exist[1])
            finally:
                self._keys_exist_refreshing = False

        threading.Thread(target=refresh, name="evolvable-keys-exist", daemon=True).start()

    def key_active_cached(self, key_id: str) -> bool | None:
        """`key_active` from memory only; None when unknown (then ask `key_active`, which does I/O)."""
        if key_id == ENV_ADMIN_KEY_ID:
            return self._admin_hash is not None
        cached = self._active.get(key_id)
        return cached[1] if cached and cached[0] > time.monotonic() else None

    def key_active(self, key_id: str) -> bool:
        """Whether the key exists and is not revoked (session keys die with the key that minted them).
        Cached for the TTL; a revocation in this process is seen at once."""
        known = self.key_active_cached(key_id)
        if known is not None:
            return known
        exists, revoked_at = self.rows.key_revoked_at(key_id)
        active = exists and revoked_at is None
        with self._lock:
            if len(self._active) >= 10_000:
                self._active.clear()
            self._active[key_id] = (time.monotonic() + self.cache_ttl_s, active)
        return active

    def init_admin(self, tenant_id: str = DEFAULT_TENANT, *, actor: str = "cli") -> IssuedKey:
        """First-run setup: the tenant (if missing) and an operator key in it (the deployment's first key
        must be able to create the other tenants and their admins)."""
        try:
            self.get_tenant(tenant_id)
        except NotFound:
            self.create_tenant(tenant_id, actor=actor)
        return self.issue_key(tenant_id, label="operator", role=Role.operator, actor=actor)
