"""The append-only audit log: who read, exported, purged or changed what, and when.

There is deliberately no update or delete method; the database rejects both with a trigger
(see `schema.py`). Details never hold content or raw end-user ids: purges by user record a
hash of the id, so the log itself needs no erasure.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel

from evolvable.governance.redaction import redact_text
from evolvable.governance.schema import ensure_governance_schema
from evolvable.protocol.models import utcnow
from evolvable.store.tables.governance import audit_log


class AuditAction(StrEnum):
    read = "read"
    export = "export"
    purge = "purge"
    policy_change = "policy_change"
    key_issued = "key_issued"
    key_revoked = "key_revoked"
    redaction_failed = "redaction_failed"
    retention = "retention"
    control_action = "control_action"


class AuditEntry(BaseModel):
    id: int
    at: datetime
    actor: str
    tenant_id: str | None
    action: AuditAction
    target: str
    details: dict[str, Any]


def pseudonym(value: str) -> str:
    """A stable, non-reversible stand-in for an end-user id in audit records."""
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:16]


_USER_KEYS = frozenset({"end_user", "user", "end_users"})


def safe_query_target(query: str) -> str:
    """A request's query string fit for the audit log: end-user ids become pseudonyms (so `purge --user` leaves
    no raw id behind) and every other value goes through the redaction engine (a search term may hold PII)."""
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    return urllib.parse.urlencode([(redact_text(k), _safe_value(k, v)) for k, v in pairs], safe="<>:")


def safe_filter(spec: dict[str, Any]) -> dict[str, Any]:
    """A trajectory filter (a dataset's) fit for the audit log: end-user ids become pseudonyms."""
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key in _USER_KEYS and isinstance(value, str):
            out[key] = pseudonym(value)
        elif key in _USER_KEYS and isinstance(value, list | tuple):
            out[key] = [pseudonym(v) if isinstance(v, str) else v for v in value]
        else:
            out[key] = value
    return out


def _safe_value(key: str, value: str) -> str:
    return pseudonym(value) if key in _USER_KEYS else redact_text(value)


class AuditLog:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        ensure_governance_schema(engine)

    def record(
        self,
        action: AuditAction | str,
        *,
        actor: str,
        tenant_id: str | None = None,
        target: str = "",
        details: dict[str, Any] | None = None,
        conn: sa.Connection | None = None,
        at: datetime | None = None,
    ) -> None:
        """Append one entry; pass `conn` to make it part of the caller's transaction."""
        row = {
            "at": at or utcnow(),
            "actor": actor,
            "tenant_id": tenant_id,
            "action": AuditAction(action).value,
            "target": target[:500],
            "details": details or {},
        }
        if conn is not None:
            conn.execute(audit_log.insert(), row)
            return
        with self.engine.begin() as own:
            own.execute(audit_log.insert(), row)

    def query(
        self,
        *,
        tenant_id: str | None = None,
        action: AuditAction | str | None = None,
        since: datetime | None = None,
        limit: int = 200,
    ) -> list[AuditEntry]:
        """Newest first."""
        stmt = sa.select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
        if tenant_id is not None:
            stmt = stmt.where(audit_log.c.tenant_id == tenant_id)
        if action is not None:
            stmt = stmt.where(audit_log.c.action == AuditAction(action).value)
        if since is not None:
            stmt = stmt.where(audit_log.c.at >= since)
        with self.engine.connect() as conn:
            return [AuditEntry.model_validate(dict(r._mapping)) for r in conn.execute(stmt)]
