"""Tenants, keys and the Authenticator seam, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from evolvable.errors import GovernanceError, NotFound
from evolvable.governance.audit import AuditAction, AuditLog
from evolvable.governance.tenants import TenantDirectory, hash_key
from evolvable.protocol.models import CaptureMode
from evolvable.proxy.hooks import Authenticator
from evolvable.store import Store
from evolvable.store.tables.governance import api_keys


def test_issue_authenticate_revoke(store: Store) -> None:
    directory = TenantDirectory(store.engine)
    assert isinstance(directory, Authenticator)
    directory.create_tenant("acme", capture="metadata", retention_days=30)
    issued = directory.issue_key("acme", label="ci")
    principal = directory.authenticate(issued.key)
    assert principal is not None and principal.tenant_id == "acme" and principal.key_id == issued.key_id
    assert not principal.is_admin
    assert directory.authenticate("Bearer " + issued.key) == principal
    assert directory.authenticate(issued.key + "x") is None
    assert directory.authenticate(None) is None

    # Only the digest is stored, never the key.
    with store.engine.connect() as conn:
        stored = conn.execute(api_keys.select()).all()
    assert [r.key_hash for r in stored] == [hash_key(issued.key)]
    assert all(issued.key not in str(tuple(r)) for r in stored)

    directory.revoke_key(issued.key_id)
    assert directory.authenticate(issued.key) is None
    # Another process (a fresh directory, cold cache) agrees.
    assert TenantDirectory(store.engine).authenticate(issued.key) is None

    actions = [e.action for e in AuditLog(store.engine).query(tenant_id="acme")]
    assert actions == [AuditAction.key_revoked, AuditAction.key_issued, AuditAction.policy_change]


def test_admin_keys(store: Store) -> None:
    directory = TenantDirectory(store.engine, admin_key="from-the-environment")
    env = directory.authenticate("from-the-environment")
    assert env is not None and env.is_admin
    issued = directory.init_admin("root")
    principal = directory.authenticate(issued.key)
    assert principal is not None and principal.is_admin and principal.tenant_id == "root"


def test_policy_update_and_validation(store: Store) -> None:
    directory = TenantDirectory(store.engine, cache_ttl_s=0)
    directory.create_tenant("acme")
    with pytest.raises(GovernanceError):
        directory.create_tenant("acme")
    with pytest.raises(GovernanceError):
        directory.create_tenant("bad id with spaces")
    with pytest.raises(NotFound):
        directory.issue_key("nobody")
    updated = directory.update_tenant("acme", agent_capture={"hr-bot": "off"}, retention_days=7)
    assert updated.capture_for("hr-bot") == CaptureMode.off
    assert updated.capture_for("support") == CaptureMode.full
    assert updated.capture_for(None) == CaptureMode.off  # unknown agent: strictest
    assert directory.policy_for("acme").retention_days == 7
    assert directory.policy_for("unregistered").capture == CaptureMode.full
    with pytest.raises(GovernanceError):
        directory.update_tenant("acme", id="other")
    with pytest.raises(GovernanceError, match="capture"):
        directory.update_tenant("acme", capture="sometimes")
    with pytest.raises(GovernanceError, match="retention_days"):
        directory.create_tenant("beta", retention_days=0)
    change = AuditLog(store.engine).query(action="policy_change")[0]
    assert change.details["after"]["retention_days"] == 7 and change.details["before"]["retention_days"] is None
