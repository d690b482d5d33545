"""Dataset snapshots and exports on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from evolvable.errors import GovernanceError, NotFound
from evolvable.governance.audit import AuditAction, AuditLog
from evolvable.governance.datasets import DatasetCatalog
from evolvable.protocol.models import Signal, SignalAttached, SignalKind, TrajectoryStatus
from evolvable.store import Store

from .builders import make_trajectory


def _seed(store: Store) -> dict[str, str]:
    runs = {
        "good": make_trajectory(question="Where is my order 1001? It was a red teapot.", task_id="task-1"),
        "dup": make_trajectory(question="Where is my order 1001? It was a red teapot.", task_id="task-1", outcome=0.0),
        "near": make_trajectory(question="Where is my order 1002? It was a red teapot.", task_id="task-2"),
        "worse": make_trajectory(
            question="Where is my order 1002? It was a red teapot.",
            answer="Sorry, I cannot help with orders.",
            task_id="task-2",
            outcome=0.0,
        ),
        "other": make_trajectory(
            question="Cancel my subscription before the next billing cycle please.",
            answer="Done, it is cancelled.",
            harness_version="h1-old",
            task_id="task-3",
        ),
        "running": make_trajectory(status=TrajectoryStatus.running, question="Unfinished business here"),
        "truncated": make_trajectory(finish_reason="length", question="A long answer that got cut"),
        "beta": make_trajectory(tenant_id="beta", question="Beta tenant's private question about invoices"),
    }
    for t in runs.values():
        store.put_trajectory(t)
    return {k: t.id for k, t in runs.items()}


def test_snapshot_curates_and_is_immutable(store: Store, tmp_path: Path) -> None:
    ids = _seed(store)
    catalog = DatasetCatalog(store)
    exact = catalog.create("support", filter={"tenant_id": "acme"}, dedup="exact")
    assert exact.version == 1 and exact.tenant_id == "acme"
    assert exact.counts["scanned"] == 7
    assert exact.counts["quality_reasons"] == {"status_running": 1, "truncated": 1}
    assert exact.counts["duplicate_exact"] == 1
    assert exact.counts["kept"] == 4
    assert exact.counts["harness_versions"] == {"h1-abc": 3, "h1-old": 1}
    near = catalog.create("support", filter={"tenant_id": "acme"}, dedup="near")
    assert near.version == 2 and near.counts["duplicate_near"] >= 1
    assert near.counts["kept"] == 4 - near.counts["duplicate_near"]
    kept = {t.id for t in catalog.iter_items(near.id)}
    assert ids["beta"] not in kept and ids["running"] not in kept
    assert len(kept & {ids["good"], ids["dup"]}) == 1

    # A late signal changes the store, not the snapshot.
    store.apply_events(
        [SignalAttached(trajectory_id=ids["other"], tenant_id="acme", signal=Signal(kind=SignalKind.outcome, value=-1))]
    )
    before = [t.model_dump_json() for t in catalog.iter_items(exact.id)]
    assert all('"value":-1.0' not in b for b in before)
    assert catalog.get("support").version == 2
    assert catalog.get("support@1").content_hash == exact.content_hash
    again = catalog.create("support", filter={"tenant_id": "acme"}, dedup="exact")
    assert again.content_hash != exact.content_hash  # the late signal is in the new snapshot
    with pytest.raises(NotFound):
        catalog.get("support@9")
    with pytest.raises(NotFound):
        catalog.get("support", tenant_id="beta")
    with pytest.raises(GovernanceError):
        catalog.create("bad name")
    with pytest.raises(GovernanceError):
        catalog.create("x", filter={"colour": "blue"})
    with pytest.raises(GovernanceError):
        catalog.create("x", filter={"tenant_id": "beta"}, tenant_id="acme")


@pytest.mark.parametrize("fmt", ["atdp", "sft", "preference", "rl-samples", "parquet"])
def test_export_records_versions(store: Store, tmp_path: Path, fmt: str) -> None:
    _seed(store)
    catalog = DatasetCatalog(store)
    info = catalog.create("support", filter={"tenant_id": "acme"}, dedup="none")
    out = tmp_path / f"export.{fmt}"
    result = catalog.export("support", fmt, out)
    manifest = orjson.loads(Path(result.manifest_path).read_bytes())
    assert manifest["dataset"]["content_hash"] == info.content_hash
    assert manifest["harness_versions"] == {"h1-abc": 4, "h1-old": 1}
    assert {t["policy_version"] for t in manifest["trajectories"]} == {"p1-base"}
    if fmt == "parquet":
        table = pq.read_table(out)
        assert table.column_names == [
            "id",
            "tenant",
            "agent",
            "harness_version",
            "policy_version",
            "status",
            "outcome",
            "steps",
            "signals",
        ]
        assert table.num_rows == 5 and set(table.column("harness_version").to_pylist()) == {"h1-abc", "h1-old"}
        assert orjson.loads(table.column("steps")[0].as_py())[0]["kind"] == "llm_call"
        return
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(records) == result.records > 0
    if fmt == "atdp":
        assert {r["harness_version"] for r in records} == {"h1-abc", "h1-old"}
    elif fmt == "sft":
        assert all(r["metadata"]["harness_version"] in {"h1-abc", "h1-old"} for r in records)
        assert all(r["metadata"]["policy_version"] == "p1-base" for r in records)
    elif fmt == "preference":
        assert records[0]["metadata"]["chosen"]["harness_version"] == "h1-abc"
    elif fmt == "rl-samples":
        assert all(r["harness_version"] and r["policy_version"] == "p1-base" for r in records)
    entry = AuditLog(store.engine).query(action=AuditAction.export)[0]
    assert entry.target == "dataset:support@1" and entry.details["format"] == fmt
    assert catalog.get("support").exported_at is not None


def test_export_rejects_unknown_format_and_scope(store: Store, tmp_path: Path) -> None:
    _seed(store)
    catalog = DatasetCatalog(store)
    catalog.create("mine", tenant_id="acme")
    with pytest.raises(GovernanceError, match="format"):
        catalog.export("mine", "csv", tmp_path / "x")
    with pytest.raises(NotFound):
        catalog.export("mine", "atdp", tmp_path / "x", tenant_id="beta")
    assert not (tmp_path / "x").exists()


def test_a_dataset_filtered_by_end_user_leaves_only_a_digest_in_the_audit_log(store: Store) -> None:
    from evolvable.governance.audit import pseudonym

    store.put_trajectory(make_trajectory(end_user="bob.rivera@example.org", question="Where is my order 77?"))
    DatasetCatalog(store).create("bob", filter={"tenant_id": "acme", "end_user": "bob.rivera@example.org"})
    (entry,) = AuditLog(store.engine).query(action=AuditAction.read)
    assert "bob.rivera" not in orjson.dumps(entry.model_dump(mode="json")).decode()
    assert entry.details["filter"]["end_user"] == pseudonym("bob.rivera@example.org")
