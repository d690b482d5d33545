"""Erasure: purge by tenant, end user or session from the store, dataset copies and the proxy's spool.

What a purge removes: the trajectories with their steps and signals (the store keeps their event ids
so a replayed event cannot resurrect them), every dataset item copied from them (snapshots that lose
items are marked invalidated), and every not-yet-stored spool record of them. Exports already written
to files are outside the store; the audit log lists them (action `export`) so they can be found.
The audit entry for a user purge names the user by a hash only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel

from evolvable.errors import GovernanceError
from evolvable.governance.audit import AuditAction, AuditLog, pseudonym
from evolvable.protocol.models import utcnow
from evolvable.store import Store
from evolvable.store.repos.audit import AuditRecord
from evolvable.store.repos.erasure import ErasureRows, ErasureSelector, erasure_rows

SpoolPurger = Callable[[Callable[[Any], bool]], int]
"""`purge(predicate) -> records removed`: a running proxy's `purge_spool`, or an offline spool directory's."""

DerivedEraser = Callable[[str | None, set[str], str], dict[str, Any]]
"""`erase(tenant_id, trajectory_ids, reason) -> {kind: count or list of affected items}`: removes or flags
what other components built from the purged runs (the control plane's memory exemplars in harness
versions, adapters trained on them). Governance never imports them; the composition root hands them in,
and what they report goes into the purge report and its audit entry."""


class PurgeRequest(BaseModel):
    tenant_id: str | None = None
    end_user: str | None = None
    trajectory_id: str | None = None
    started_before: datetime | None = None

    def describe(self) -> str:
        parts = []
        if self.tenant_id:
            parts.append(f"tenant:{self.tenant_id}")
        if self.end_user:
            parts.append(f"user:{pseudonym(self.end_user)}")
        if self.trajectory_id:
            parts.append(f"trajectory:{self.trajectory_id}")
        if self.started_before:
            parts.append(f"before:{self.started_before.isoformat()}")
        return " ".join(parts)


class PurgeReport(BaseModel):
    trajectories: int
    dataset_items: int
    datasets_invalidated: int
    spool_records: int | None
    """None when no spool was reachable (say so to the caller)."""
    derived: dict[str, Any] = {}
    """Copies erased elsewhere, by kind (e.g. `exemplars`, `harness_versions`)."""
    wal_checkpointed: bool | None = None
    """SQLite: whether the write-ahead log was checkpointed and truncated, so the deleted rows' old page
    images are gone from disk too (False: a reader held it; it happens at the next checkpoint)."""


def _event_dicts(payload: bytes | dict[str, Any]) -> list[dict[str, Any]]:
    """The records inside one spool payload (raw bytes or parsed: a record, a list, or a wrapper with `events`)."""
    if isinstance(payload, dict):
        doc: Any = payload
    else:
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return []
    if isinstance(doc, list):
        return [d for d in doc if isinstance(d, dict)]
    if isinstance(doc, dict):
        if isinstance(doc.get("events"), list):
            return [d for d in doc["events"] if isinstance(d, dict)]
        if isinstance(doc.get("event"), dict):
            return [doc["event"]]
        return [doc]
    return []


def _end_user(event: dict[str, Any]) -> str | None:
    header = event.get("header")
    if isinstance(header, dict):
        return header.get("end_user")
    return event.get("end_user")


def spool_matcher(request: PurgeRequest, trajectory_ids: set[str]) -> Callable[[Any], bool]:
    """A predicate over spool records (raw bytes or parsed dicts); it learns ids of the user's runs as it scans."""

    def matches(payload: bytes | dict[str, Any]) -> bool:
        hit = False
        for event in _event_dicts(payload):
            tid = event.get("traj") or event.get("trajectory_id")
            tenant = event.get("tenant") or event.get("tenant_id") or "default"
            if request.tenant_id is not None and tenant != request.tenant_id:
                continue
            if request.trajectory_id is not None:
                hit = hit or tid == request.trajectory_id
            elif request.end_user is not None:
                if _end_user(event) == request.end_user:
                    hit = True
                    if tid:
                        trajectory_ids.add(tid)
                elif tid in trajectory_ids:
                    hit = True
            else:
                hit = True  # tenant-wide purge
        return hit

    return matches


class Purger:
    def __init__(
        self,
        store: Store,
        *,
        audit: AuditLog | None = None,
        spool_purger: SpoolPurger | None = None,
        erasers: Sequence[DerivedEraser] = (),
        rows: ErasureRows | None = None,
    ) -> None:
        self.store = store
        self.audit = audit or AuditLog(store.engine)
        self.rows = rows or erasure_rows(store.engine)
        self.spool_purger = spool_purger
        self.erasers = tuple(erasers)

    def purge(
        self,
        request: PurgeRequest,
        *,
        actor: str = "cli",
        action: AuditAction = AuditAction.purge,
        audit_empty: bool = True,
    ) -> PurgeReport:
        """Erase everything the request selects (all given selectors must hold)."""
        from evolvable.store import TrajectoryFilter

        if not (request.tenant_id or request.end_user or request.trajectory_id or request.started_before):
            raise GovernanceError("a purge needs a tenant, an end user, a session/trajectory id, or a cut-off time")
        selector = TrajectoryFilter(
            tenant_id=request.tenant_id,
            end_user=request.end_user,
            ids=[request.trajectory_id] if request.trajectory_id else None,
            started_before=request.started_before,
        )
        # Ids first: the spool may hold later events of these runs that carry no end_user; derived copies
        # (exemplars) are found by the ids of the runs they came from.
        known_ids = {h.id for h in self._headers(selector)} if request.end_user or self.erasers else set()
        spool_records: int | None = None
        if self.spool_purger is not None and request.started_before is None:
            matcher = spool_matcher(request, known_ids)
            spool_records = self.spool_purger(matcher)
            if request.end_user is not None:
                # A second pass catches events that came before their run's start record.
                spool_records += self.spool_purger(matcher)
        removed = self.store.delete_trajectories(selector)
        derived: dict[str, Any] = {}
        for erase in self.erasers:
            for kind, found in erase(request.tenant_id, known_ids, f"{action.value} {request.describe()}").items():
                derived[kind] = derived.get(kind, [] if isinstance(found, list) else 0) + found

        def entry(items: int, invalidated: int) -> AuditRecord | None:
            if not (audit_empty or removed or items or spool_records or any(derived.values())):
                return None
            return self.audit.entry(
                action,
                actor=actor,
                tenant_id=request.tenant_id,
                target=request.describe(),
                details={
                    "trajectories": removed,
                    "dataset_items": items,
                    "datasets_invalidated": invalidated,
                    "spool_records": spool_records,
                    **derived,
                },
            )

        # Session rows and dataset copies go with their audit entry, in one transaction.
        items, invalidated = self.rows.erase_copies(
            ErasureSelector(
                tenant_id=request.tenant_id,
                end_user=request.end_user,
                trajectory_id=request.trajectory_id,
                started_before=request.started_before,
            ),
            reason=f"{action.value} {request.describe()}",
            at=utcnow(),
            audit=entry,
        )
        return PurgeReport(
            trajectories=removed,
            dataset_items=items,
            datasets_invalidated=invalidated,
            spool_records=spool_records,
            derived=derived,
            wal_checkpointed=self.rows.checkpoint() if removed or items else None,
        )

    def _headers(self, selector: Any) -> list[Any]:
        out, cursor = [], None
        while True:
            page, cursor = self.store.list_trajectories(selector, limit=500, cursor=cursor)
            out.extend(page)
            if cursor is None:
                return out
