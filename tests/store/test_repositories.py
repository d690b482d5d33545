"""Repositories: migrations alone make the schema, and components run on any implementation of a Protocol."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from evolvable.control.journal import Journal
from evolvable.control.models import Lever
from evolvable.control.registry import Registry
from evolvable.control.task_clusters import ClustererStore
from evolvable.errors import GovernanceError, NotFound
from evolvable.governance.audit import AuditAction, AuditLog
from evolvable.governance.datasets import DatasetCatalog
from evolvable.governance.purge import Purger
from evolvable.governance.tenants import TenantDirectory
from evolvable.proxy.sessions import SessionManager
from evolvable.store import Store
from evolvable.store.repos.audit import AuditRecord, AuditRows
from evolvable.store.repos.tenants import Row, TenantRows


def test_building_components_creates_no_table(blank_db_url: str) -> None:
    """Only the migration runner makes tables: a constructor on an unmigrated database leaves it empty."""
    store = Store.open(blank_db_url, migrate_schema=False)
    try:
        engine = store.engine
        AuditLog(engine)
        TenantDirectory(engine)
        DatasetCatalog(store)
        Purger(store)
        Registry(engine)
        Journal(engine)
        ClustererStore(engine)
        SessionManager(store)
        assert sa.inspect(engine).get_table_names() == []
    finally:
        store.close()


def test_components_fail_on_an_unmigrated_database(blank_db_url: str) -> None:
    store = Store.open(blank_db_url, migrate_schema=False)
    try:
        with pytest.raises(sa.exc.OperationalError if "sqlite" in blank_db_url else sa.exc.ProgrammingError):
            TenantDirectory(store.engine).list_tenants()
    finally:
        store.close()


def test_migrated_store_serves_every_repository(store: Store) -> None:
    registry, journal = Registry(store.engine), Journal(store.engine)
    decision = journal.record_decision("support", Lever.prompt, rationale="why")
    assert journal.decision(decision.id[:8]).rationale == "why"
    assert registry.versions() == [] and registry.tenants() == []


class _MemoryAudit:
    def __init__(self) -> None:
        self.entries: list[AuditRecord] = []

    def append(self, record: AuditRecord) -> None:
        self.entries.append(record)

    def query(
        self, *, tenant_id: str | None, action: str | None, since: datetime | None, limit: int
    ) -> list[Mapping[str, Any]]:
        found = [e for e in reversed(self.entries) if tenant_id in (None, e.tenant_id) and action in (None, e.action)]
        return [{"id": i, **vars(e)} for i, e in enumerate(found[:limit])]


class _MemoryTenants:
    """Tenant rows in dicts; an audit entry is appended with its change, as the SQL one does in a transaction."""

    def __init__(self, audit: _MemoryAudit) -> None:
        self.audit = audit
        self.by_id: dict[str, dict[str, Any]] = {}
        self.key_rows: dict[str, dict[str, Any]] = {}

    def tenant(self, tenant_id: str) -> Row | None:
        return self.by_id.get(tenant_id)

    def tenants(self) -> list[Row]:
        return [self.by_id[k] for k in sorted(self.by_id)]

    def insert_tenant(self, row: Row, audit: AuditRecord) -> bool:
        if row["id"] in self.by_id:
            return False
        self.by_id[row["id"]] = dict(row)
        self.audit.append(audit)
        return True

    def update_tenant(self, tenant_id: str, row: Row, audit: AuditRecord) -> None:
        self.by_id[tenant_id] = dict(row)
        self.audit.append(audit)

    def insert_key(self, row: Row, audit: AuditRecord) -> None:
        self.key_rows[row["id"]] = dict(row)
        self.audit.append(audit)

    def revoke_key(
        self, key_id: str, tenant_id: str | None, at: datetime, audit: Callable[[Row], AuditRecord]
    ) -> Row | None:
        row = self.key_rows.get(key_id)
        if row is None or tenant_id not in (None, row["tenant_id"]):
            return None
        if row["revoked_at"] is None:
            row["revoked_at"] = at
            self.audit.append(audit(row))
        return row

    def keys(self, *, tenant_id: str | None = None, key_id: str | None = None) -> list[Row]:
        return [r for r in self.key_rows.values() if tenant_id in (None, r["tenant_id"]) and key_id in (None, r["id"])]

    def key_by_hash(self, key_hash: str) -> Row | None:
        return next((r for r in self.key_rows.values() if r["key_hash"] == key_hash), None)

    def any_key(self) -> bool:
        return bool(self.key_rows)

    def key_revoked_at(self, key_id: str) -> tuple[bool, datetime | None]:
        row = self.key_rows.get(key_id)
        return (False, None) if row is None else (True, row["revoked_at"])


def test_tenant_directory_runs_on_a_fake_repository() -> None:
    audit_rows = _MemoryAudit()
    rows = _MemoryTenants(audit_rows)
    typed_rows: TenantRows = rows  # the fakes satisfy the Protocols (checked by mypy)
    typed_audit: AuditRows = audit_rows
    directory = TenantDirectory(typed_rows, audit=AuditLog(typed_audit), cache_ttl_s=0)
    directory.create_tenant("acme", retention_days=7)
    with pytest.raises(GovernanceError, match="already exists"):
        directory.create_tenant("acme")
    issued = directory.issue_key("acme", label="ci")
    principal = directory.authenticate(f"Bearer {issued.key}")
    assert principal is not None and principal.tenant_id == "acme"
    directory.revoke_key(issued.key_id)
    assert directory.authenticate(issued.key) is None and not directory.key_active(issued.key_id)
    with pytest.raises(NotFound):
        directory.revoke_key("key_missing")
    actions = [e.action for e in AuditLog(typed_audit).query(tenant_id="acme")]
    assert actions == [AuditAction.key_revoked, AuditAction.key_issued, AuditAction.policy_change]


def test_a_directory_on_a_repository_needs_its_audit_log() -> None:
    with pytest.raises(GovernanceError, match="audit"):
        TenantDirectory(_MemoryTenants(_MemoryAudit()))
