"""Purge and retention reach the control plane: exemplars copied from erased runs leave every harness version
(active, retired, candidate) of the tenant, the audit entry counts them, and other tenants keep theirs."""

from __future__ import annotations

from datetime import timedelta

from tests.control.conftest import AGENT, base_harness, make_trajectory

from evolvable.control.erasure import exemplar_eraser
from evolvable.control.models import VersionKind, VersionState
from evolvable.control.registry import Registry, now
from evolvable.governance.audit import AuditAction, AuditLog
from evolvable.governance.purge import Purger, PurgeRequest
from evolvable.governance.retention import RetentionJob
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.harness import MemoryExemplar
from evolvable.protocol.models import ChatMessage


def exemplar_of(trajectory_id: str, text: str) -> MemoryExemplar:
    return MemoryExemplar(
        id=f"ex-{trajectory_id}",
        cluster="refund",
        task_input=text,
        messages=[ChatMessage(role="user", content=text), ChatMessage(role="assistant", content="done")],
        source_trajectory_id=trajectory_id,
    )


def test_user_purge_erases_exemplars_copied_from_their_runs(store) -> None:
    acme, globex = Registry(store.engine, "acme"), Registry(store.engine, "globex")
    alice = make_trajectory(cluster="refund", success=True, harness_version=None, task_text="alice's refund")
    bob = make_trajectory(cluster="refund", success=True, harness_version=None, task_text="bob's refund")
    alice.tenant_id = bob.tenant_id = "acme"
    alice.end_user, bob.end_user = "alice", "bob"
    for t in (alice, bob):
        store.put_trajectory(t)
    both = base_harness().model_copy(update={"memory": [exemplar_of(alice.id, "alice"), exemplar_of(bob.id, "bob")]})
    old = acme.register_harness(both, state=VersionState.active)
    new = acme.register_harness(both.model_copy(update={"system_prompt": "v2"}), state=VersionState.active)
    other = globex.register_harness(both, state=VersionState.active)  # same content, another tenant
    assert acme.get(old.id).state == VersionState.retired

    report = Purger(store, erasers=(exemplar_eraser(store.engine),)).purge(
        PurgeRequest(tenant_id="acme", end_user="alice"), actor="test"
    )
    assert report.trajectories == 1 and report.derived == {"exemplars": 2, "harness_versions": 2}
    for version in (old.id, new.id):
        record = acme.get(version)
        assert [ex.source_trajectory_id for ex in record.harness().memory] == [bob.id]
        assert "alice" not in record.model_dump_json()
        assert record.lineage["erased"][0]["exemplars"] == 1
    assert len(globex.get(other.id).harness().memory) == 2  # the purge named acme
    assert acme.current(AGENT, VersionKind.harness, VersionState.active).id == new.id  # still served, scrubbed
    entry = AuditLog(store.engine).query(action=AuditAction.purge)[0]
    assert entry.details["exemplars"] == 2 and entry.details["harness_versions"] == 2


def test_retention_erases_exemplars_of_expired_runs(store) -> None:
    directory = TenantDirectory(store.engine)
    directory.create_tenant("acme", retention_days=30)
    registry = Registry(store.engine, "acme")
    expired = make_trajectory(cluster="refund", success=True, harness_version=None, task_text="old refund")
    expired.tenant_id = "acme"
    expired.started_at = now() - timedelta(days=40)
    store.put_trajectory(expired)
    version = registry.register_harness(
        base_harness().model_copy(update={"memory": [exemplar_of(expired.id, "old refund")]}), state=VersionState.active
    )
    job = RetentionJob(store, directory=directory, purger=Purger(store, erasers=(exemplar_eraser(store.engine),)))
    results = job.run_once()
    assert [r.trajectories for r in results] == [1]
    assert registry.get(version.id).harness().memory == []
