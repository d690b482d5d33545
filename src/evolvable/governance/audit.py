"""The append-only audit log: who read, exported, purged or changed what, and when.

There is deliberately no update or delete method; the database rejects both with a trigger
(installed by migration 0002). Details never hold content or raw end-user ids: purges by user record a
hash of the id, so the log itself needs no erasure.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from evolvable.governance.redaction import redact_text
from evolvable.protocol.models import utcnow
from evolvable.store.engine import Engine
from evolvable.store.repos.audit import AuditRecord, AuditRows, audit_rows


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
    """Appends and reads audit entries through the audit repository (an engine is wrapped in the SQL one)."""

    def __init__(self, rows: AuditRows | Engine) -> None:
        self.rows = audit_rows(rows)

    @staticmethod
    def entry(
        action: AuditAction | str,
        *,
        actor: str,
        tenant_id: str | None = None,
        target: str = "",
        details: dict[str, Any] | None = None,
        at: datetime | None = None,
    ) -> AuditRecord:
        """An entry to hand to a repository that writes it in the same transaction as its change."""
        return AuditRecord(
            at=at or utcnow(),
            actor=actor,
            tenant_id=tenant_id,
            action=AuditAction(action).value,
            target=target[:500],
            details=details or {},
        )

    def record(
        self,
        action: AuditAction | str,
        *,
        actor: str,
        tenant_id: str | None = None,
        target: str = "",
        details: dict[str, Any] | None = None,
        at: datetime | None = None,
    ) -> None:
        """Append one entry in its own transaction."""
        self.rows.append(self.entry(action, actor=actor, tenant_id=tenant_id, target=target, details=details, at=at))

    def query(
        self,
        *,
        tenant_id: str | None = None,
        action: AuditAction | str | None = None,
        since: datetime | None = None,
        limit: int = 200,
    ) -> list[AuditEntry]:
        """Newest first."""
        wanted = AuditAction(action).value if action is not None else None
        rows = self.rows.query(tenant_id=tenant_id, action=wanted, since=since, limit=limit)
        return [AuditEntry.model_validate(dict(r)) for r in rows]
