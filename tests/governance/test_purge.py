"""Erasure and retention: store, dataset copies, the proxy's spool, and the audit trail."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from evolvable.errors import GovernanceError, NotFound
from evolvable.governance.audit import AuditAction, AuditLog
from evolvable.governance.datasets import DatasetCatalog
from evolvable.governance.purge import Purger, PurgeRequest
from evolvable.governance.retention import RetentionJob
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.models import utcnow
from evolvable.proxy.spool import Spool
from evolvable.proxy.spool_purger import offline_spool_purger
from evolvable.store import Store, TrajectoryFilter

from .builders import make_trajectory


def _spool_bytes(directory: Path) -> bytes:
    """Every byte the spool holds on disk, whatever the checkpoint says."""
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file())


def _fill_spool(directory: Path, records: list[dict]) -> None:
    spool = Spool(directory, queue_size=64).open()
    try:
        for r in records:
            assert spool.append_nowait(orjson.dumps(r))
    finally:
        spool.close()


def test_purge_by_user_everywhere(store: Store, tmp_path: Path) -> None:
    alice = [make_trajectory(end_user="alice@example.com", question=f"alice question {i}") for i in range(3)]
    bob = make_trajectory(end_user="bob", question="bob question")
    other_tenant_alice = make_trajectory(tenant_id="beta", end_user="alice@example.com", question="beta alice")
    for t in [*alice, bob, other_tenant_alice]:
        store.put_trajectory(t)
    catalog = DatasetCatalog(store)
    ds = catalog.create("all", dedup="none")
    untouched = catalog.create("bob-only", filter={"end_user": "bob"}, dedup="none")
    spool_dir = tmp_path / "spool"
    _fill_spool(
        spool_dir,
        [
            {"t": "session", "traj": "traj_new", "tenant": "acme", "end_user": "alice@example.com", "agent": "a"},
            {"t": "call", "traj": "traj_new", "tenant": "acme", "sess": "traj_new", "request": {"messages": []}},
            {"t": "signal", "traj": alice[0].id, "tenant": "acme", "signal": {"kind": "outcome", "value": 1}},
            {"t": "session", "traj": "traj_bob", "tenant": "acme", "end_user": "bob", "agent": "a"},
        ],
    )

    purger = Purger(store, spool_purger=offline_spool_purger(spool_dir))
    report = purger.purge(PurgeRequest(tenant_id="acme", end_user="alice@example.com"), actor="key_admin")
    assert report.trajectories == 3 and report.spool_records == 3
    assert report.dataset_items == 3 and report.datasets_invalidated == 1
    for t in alice:
        with pytest.raises(NotFound):
            store.get_trajectory(t.id)
    assert store.get_trajectory(bob.id) and store.get_trajectory(other_tenant_alice.id)
    left = _spool_bytes(spool_dir)
    assert b"traj_bob" in left and b"alice" not in left and b"traj_new" not in left and alice[0].id.encode() not in left
    # A replay of a purged run's events cannot resurrect it.
    from evolvable.protocol.models import events_for

    store.apply_events(events_for(alice[0]))
    with pytest.raises(NotFound):
        store.get_trajectory(alice[0].id)

    ids = {t.id for t in catalog.iter_items(ds.id)}
    assert ids == {bob.id, other_tenant_alice.id}
    assert catalog.get(ds.ref).invalidated_at is not None
    with pytest.raises(GovernanceError, match="invalidated"):
        catalog.export(ds.ref, "atdp", tmp_path / "x.jsonl")
    assert catalog.get(untouched.ref).invalidated_at is None
    entry = AuditLog(store.engine).query(action=AuditAction.purge)[0]
    assert entry.actor == "key_admin" and "alice" not in entry.target and entry.details["trajectories"] == 3


def test_purge_by_session_and_tenant(store: Store, tmp_path: Path) -> None:
    runs = [make_trajectory(question=f"q{i}") for i in range(3)]
    beta = make_trajectory(tenant_id="beta")
    for t in [*runs, beta]:
        store.put_trajectory(t)
    purger = Purger(store)
    assert purger.purge(PurgeRequest(trajectory_id=runs[0].id)).trajectories == 1
    assert purger.purge(PurgeRequest(trajectory_id=beta.id, tenant_id="acme")).trajectories == 0
    assert purger.purge(PurgeRequest(tenant_id="acme")).trajectories == 2
    assert store.count(TrajectoryFilter()) == 1
    with pytest.raises(GovernanceError):
        purger.purge(PurgeRequest())


def test_retention_erases_old_runs_per_tenant(store: Store) -> None:
    now = utcnow()
    directory = TenantDirectory(store.engine)
    directory.create_tenant("acme", retention_days=30)
    directory.create_tenant("beta")  # keeps everything
    old = make_trajectory(started_at=now - timedelta(days=40), question="old run")
    fresh = make_trajectory(started_at=now - timedelta(days=3), question="fresh run")
    beta_old = make_trajectory(tenant_id="beta", started_at=now - timedelta(days=400))
    for t in (old, fresh, beta_old):
        store.put_trajectory(t)
    catalog = DatasetCatalog(store)
    ds = catalog.create("acme-all", filter={"tenant_id": "acme"}, dedup="none")
    assert ds.counts["kept"] == 2

    results = RetentionJob(store).run_once(now)
    assert [(r.tenant_id, r.trajectories, r.dataset_items) for r in results] == [("acme", 1, 1)]
    with pytest.raises(NotFound):
        store.get_trajectory(old.id)
    assert store.get_trajectory(fresh.id) and store.get_trajectory(beta_old.id)
    assert [t.id for t in catalog.iter_items(ds.id)] == [fresh.id]
    assert RetentionJob(store).run_once(now)[0].trajectories == 0
    audit = AuditLog(store.engine).query(action=AuditAction.retention)
    assert len(audit) == 1 and audit[0].tenant_id == "acme"  # empty runs are not logged


async def test_retention_loop_runs_and_stops(store: Store) -> None:
    import asyncio

    from evolvable.governance.retention import retention_loop

    directory = TenantDirectory(store.engine)
    directory.create_tenant("acme", retention_days=1)
    store.put_trajectory(make_trajectory(started_at=utcnow() - timedelta(days=2)))
    task = asyncio.create_task(retention_loop(store, interval_s=0.05))
    for _ in range(200):
        await asyncio.sleep(0.05)
        if store.count(TrajectoryFilter()) == 0:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store.count(TrajectoryFilter()) == 0


def test_purge_refuses_a_spool_held_by_a_running_proxy(store: Store, tmp_path: Path) -> None:
    from evolvable.proxy.spool import SpoolError

    run = make_trajectory(end_user="dave")
    store.put_trajectory(run)
    held = Spool(tmp_path / "spool", queue_size=4).open()
    try:
        purger = Purger(store, spool_purger=offline_spool_purger(tmp_path / "spool"))
        with pytest.raises(SpoolError, match="in use"):
            purger.purge(PurgeRequest(end_user="dave"))
    finally:
        held.close()
    assert store.get_trajectory(run.id)  # nothing was erased half-way


def test_purged_content_is_gone_from_the_sqlite_file(tmp_path: Path) -> None:
    """Deleted rows must not survive as old page images in the WAL or as free pages in the file."""
    store = Store.open(f"sqlite:///{tmp_path / 'erase.db'}")
    try:
        for i in range(20):
            store.put_trajectory(make_trajectory(end_user="zed", question=f"ZEDMARKER question {i} " + "x" * 300))
        store.put_trajectory(make_trajectory(end_user="amy", question="AMYMARKER question"))
        report = Purger(store).purge(PurgeRequest(end_user="zed"))
        assert report.trajectories == 20 and report.wal_checkpointed is True
        raw = b"".join(p.read_bytes() for p in tmp_path.glob("erase.db*"))
        assert b"ZEDMARKER" not in raw and b"AMYMARKER" in raw
    finally:
        store.close()
