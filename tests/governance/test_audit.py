"""The audit log is append-only: no API to change it, and the database refuses UPDATE and DELETE."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from evolvable.governance.audit import AuditAction, AuditLog, pseudonym
from evolvable.protocol.models import utcnow
from evolvable.store import Store
from evolvable.store.tables.governance import audit_log


def test_append_and_query(store: Store) -> None:
    log = AuditLog(store.engine)
    log.record(AuditAction.read, actor="key_1", tenant_id="a", target="trajectory:t1")
    log.record(AuditAction.export, actor="cli", tenant_id="b", target="dataset:x@1", details={"records": 3})
    assert [e.action for e in log.query()] == [AuditAction.export, AuditAction.read]
    assert [e.target for e in log.query(tenant_id="a")] == ["trajectory:t1"]
    assert log.query(action="export")[0].details == {"records": 3}
    assert log.query(since=utcnow() + timedelta(hours=1)) == []
    assert len(log.query(since=utcnow() - timedelta(hours=1))) == 2
    assert not hasattr(log, "update") and not hasattr(log, "delete")
    with pytest.raises(ValueError):
        log.record("rewrite_history", actor="cli")


def test_database_rejects_update_and_delete(store: Store) -> None:
    log = AuditLog(store.engine)
    log.record(AuditAction.purge, actor="cli", tenant_id="a", target=f"user:{pseudonym('alice@example.com')}")
    with pytest.raises(sa.exc.DBAPIError, match="append-only"), store.engine.begin() as conn:
        conn.execute(audit_log.update().values(actor="someone-else"))
    with pytest.raises(sa.exc.DBAPIError, match="append-only"), store.engine.begin() as conn:
        conn.execute(audit_log.delete())
    if store.engine.dialect.name == "postgresql":
        with pytest.raises(sa.exc.DBAPIError, match="append-only"), store.engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE audit_log"))
    entries = log.query()
    assert len(entries) == 1 and entries[0].actor == "cli"
    assert "alice" not in entries[0].target
