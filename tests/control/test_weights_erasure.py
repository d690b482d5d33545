"""Erasure reaches weights: a purge that removes trajectories an adapter learnt from flags that adapter,
lists it in the purge report and the audit log, and by policy retires it (the parent serves again)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from evolvable.control.erasure import WeightsErasure, trained_on
from evolvable.control.models import PolicySpec, VersionState
from evolvable.control.registry import Registry
from evolvable.governance.audit import AuditLog
from evolvable.governance.purge import Purger, PurgeRequest
from evolvable.protocol.models import Trajectory
from evolvable.store import Store


def trajectories(store: Store, user: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        t = Trajectory(agent="a", tenant_id="t1", end_user=user, task_input=f"task {i}")
        store.put_trajectory(t)
        ids.append(t.id)
    return ids


def adapter(registry: Registry, name: str, ids: list[str], parent: str | None) -> str:
    spec = PolicySpec(base_model="m", lora_name=name, adapter_path=f"/adapters/{name}")
    data = json.dumps({"job": name, "trajectory_ids": ids})
    return registry.register_policy("a", spec, parent=parent, data_snapshot=data).id


@pytest.fixture
def world(db_url: str):
    store = Store.open(db_url)
    registry = Registry(store.engine, tenant=None)
    alice, bob = trajectories(store, "alice", 3), trajectories(store, "bob", 3)
    base = registry.register_policy("a", PolicySpec(base_model="m")).id
    registry.promote(base)
    trained = adapter(registry, "rl-1", alice + bob, base)
    registry.promote(trained)
    candidate = adapter(registry, "rl-2", bob, trained)
    return store, registry, base, trained, candidate


def test_purging_a_user_retires_the_adapter_that_learnt_from_them(world) -> None:
    store, registry, base, trained, candidate = world
    assert len(trained_on(registry.get(trained))) == 6
    report = Purger(store, erasers=[WeightsErasure(registry)]).purge(PurgeRequest(end_user="alice"), actor="test")
    assert report.trajectories == 3
    assert report.derived["adapters"] == [
        {"policy_version": trained, "agent": "a", "purged_trajectories": 3, "action": f"retired; {base} restored"}
    ]
    assert registry.get(trained).state == VersionState.retired and registry.get(base).state == VersionState.active
    assert registry.get(candidate).state == VersionState.candidate  # never saw alice's data
    [entry] = AuditLog(store.engine).query(action="purge")
    assert entry.details["adapters"][0]["policy_version"] == trained


def test_retrain_policy_flags_without_changing_what_serves(world) -> None:
    store, registry, _, trained, candidate = world
    erasure = WeightsErasure(registry, policy="retrain")
    report = Purger(store, erasers=[erasure]).purge(PurgeRequest(end_user="bob"), actor="test")
    assert {d["policy_version"]: d["action"] for d in report.derived["adapters"]} == {
        trained: "flagged for retraining",
        candidate: "flagged for retraining",
    }
    assert registry.get(trained).state == VersionState.active


def test_the_purge_command_lists_affected_adapters(world, db_url: str, tmp_path) -> None:
    from evolvable.cli.main import app

    _, registry, _, trained, candidate = world
    result = CliRunner().invoke(
        app, ["purge", "--user", "bob", "--yes", "--db", db_url, "--spool", str(tmp_path / "none")]
    )
    assert result.exit_code == 0, result.output
    assert trained in result.output and candidate in result.output
    assert registry.get(candidate).state == VersionState.rejected
