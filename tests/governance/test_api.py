"""The governance HTTP API mounted on the real proxy: admin routes, datasets, and tenant isolation.

The isolation test is property-style: many tenants, a seeded random sequence of reads, lists,
dataset calls and admin calls with random keys, each checked against what that key may see.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evolvable.governance.api import AuditReadsMiddleware, governance_routers
from evolvable.governance.audit import AuditAction, AuditLog
from evolvable.governance.pipeline import Governor
from evolvable.governance.tenants import TenantDirectory
from evolvable.proxy.app import create_app
from evolvable.proxy.config import ProxyConfig, UpstreamConfig
from evolvable.store import Store

from .builders import make_trajectory

ADMIN_KEY = "test-admin-key-from-settings"


class ReplacingRedactor:
    def redact_events(self, events: list[Any]) -> list[Any]:
        return events


@pytest.fixture
def client(store: Store, tmp_path: Path) -> Iterator[TestClient]:
    directory = TenantDirectory(store.engine, admin_key=ADMIN_KEY)
    config = ProxyConfig(
        upstreams=[UpstreamConfig(name="nowhere", base_url="http://127.0.0.1:9/v1")], spool_dir=tmp_path / "spool"
    )
    app = create_app(
        config,
        store,
        governor=Governor(store, directory=directory, redactor=ReplacingRedactor()),
        authenticator=directory,
        routers=governance_routers(store, directory),
    )
    app.add_middleware(AuditReadsMiddleware, directory=directory)
    with TestClient(app) as c:
        c.directory = directory  # type: ignore[attr-defined]
        yield c


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_admin_routes(client: TestClient, store: Store) -> None:
    admin = _auth(ADMIN_KEY)
    r = client.post(
        "/v1/admin/tenants", json={"id": "acme", "capture": "metadata", "retention_days": 30}, headers=admin
    )
    assert r.status_code == 201, r.text
    assert r.json()["capture"] == "metadata"
    assert client.post("/v1/admin/tenants", json={"id": "acme"}, headers=admin).status_code == 400
    bad = client.post("/v1/admin/tenants", json={"id": "x", "capture": "sometimes"}, headers=admin)
    assert bad.status_code == 400 and "error" in bad.json()
    r = client.patch("/v1/admin/tenants/acme", json={"agent_capture": {"hr": "off"}}, headers=admin)
    assert r.status_code == 200 and r.json()["agent_capture"] == {"hr": "off"} and r.json()["retention_days"] == 30
    assert client.patch("/v1/admin/tenants/nope", json={"name": "x"}, headers=admin).status_code == 404
    assert [t["id"] for t in client.get("/v1/admin/tenants", headers=admin).json()["data"]] == ["acme"]

    issued = client.post("/v1/admin/tenants/acme/keys", json={"label": "bot"}, headers=admin).json()
    user = _auth(issued["key"])
    assert client.get("/v1/admin/tenants", headers=user).status_code == 403
    assert client.get("/v1/admin/tenants").status_code == 401
    assert client.get("/v1/admin/tenants", headers=_auth("evk_wrong")).json()["error"]["code"] == "invalid_api_key"
    keys = client.get("/v1/admin/tenants/acme/keys", headers=admin).json()["data"]
    assert [k["id"] for k in keys] == [issued["key_id"]] and "key" not in keys[0]

    store.put_trajectory(make_trajectory(tenant_id="acme", end_user="carol"))
    r = client.post("/v1/admin/purge", json={"tenant_id": "acme", "end_user": "carol"}, headers=admin)
    assert r.status_code == 200 and r.json()["trajectories"] == 1 and r.json()["spool_records"] == 0
    assert client.post("/v1/admin/purge", json={}, headers=admin).status_code == 400
    assert client.post("/v1/admin/purge", json={"tenant_id": "acme"}, headers=user).status_code == 403

    r = client.delete(f"/v1/admin/tenants/acme/keys/{issued['key_id']}", headers=admin)
    assert r.status_code == 200 and r.json()["revoked_at"]
    assert client.get("/v1/datasets", headers=user).status_code == 401

    audit = client.get("/v1/admin/audit", params={"tenant_id": "acme"}, headers=admin).json()["data"]
    assert [e["action"] for e in audit] == ["key_revoked", "purge", "key_issued", "policy_change", "policy_change"]
    assert all(e["actor"] == "env-admin" for e in audit)
    assert client.get("/v1/admin/audit", params={"action": "nonsense"}, headers=admin).status_code == 400


def test_tenant_isolation_under_random_access(client: TestClient, store: Store) -> None:
    rng = random.Random(20261122)
    directory: TenantDirectory = client.directory  # type: ignore[attr-defined]
    tenants = [f"tenant-{i}" for i in range(6)]
    keys: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for tenant in tenants:
        directory.create_tenant(tenant)
        keys[tenant] = [directory.issue_key(tenant).key for _ in range(2)]
        for j in range(rng.randint(1, 4)):
            t = make_trajectory(tenant_id=tenant, question=f"{tenant} question {j} {rng.random()}")
            store.put_trajectory(t)
            owner[t.id] = tenant
    datasets: dict[str, str] = {}
    all_ids = [*owner, "traj_does_not_exist"]
    checked = 0
    for step in range(120):
        tenant = rng.choice(tenants)
        headers = _auth(rng.choice(keys[tenant]))
        op = rng.choice(["get", "get", "list", "dataset_create", "dataset_read", "admin"])
        if op == "get":
            tid = rng.choice(all_ids)
            r = client.get(f"/v1/trajectories/{tid}", headers=headers)
            if owner.get(tid) == tenant:
                assert r.status_code == 200 and r.json()["tenant_id"] == tenant
            else:
                assert r.status_code == 404, (tid, tenant)
                assert tid not in r.text or "not found" in r.text
        elif op == "list":
            r = client.get("/v1/trajectories", params={"limit": 500}, headers=headers)
            assert r.status_code == 200
            assert {h["id"] for h in r.json()["data"]} == {i for i, o in owner.items() if o == tenant}
        elif op == "dataset_create":
            r = client.post("/v1/datasets", json={"name": f"ds{step}", "dedup": "none"}, headers=headers)
            assert r.status_code == 201, r.text
            datasets[f"ds{step}"] = tenant
            assert r.json()["counts"]["kept"] == sum(1 for o in owner.values() if o == tenant)
            sneaky = client.post(
                "/v1/datasets", json={"name": "x", "filter": {"tenant_id": rng.choice(tenants)}}, headers=headers
            )
            assert sneaky.status_code in (201, 400)
            if sneaky.status_code == 201:
                assert sneaky.json()["tenant_id"] == tenant
                datasets.setdefault("x", tenant)
        elif op == "dataset_read" and datasets:
            name = rng.choice(sorted(datasets))
            listed = {d["name"] for d in client.get("/v1/datasets", headers=headers).json()["data"]}
            assert all(datasets.get(n) == tenant or n == "x" for n in listed)
            r = client.get(f"/v1/datasets/{name}/export", params={"format": "atdp"}, headers=headers)
            if datasets[name] == tenant:
                assert r.status_code == 200, r.text
                rows = [orjson.loads(line) for line in r.content.splitlines()]
                assert rows and {row["tenant_id"] for row in rows} == {tenant}
            elif name != "x":
                assert r.status_code == 404
        elif op == "admin":
            assert client.get("/v1/admin/audit", headers=headers).status_code == 403
        checked += 1
    assert checked == 120

    # Every successful read was audited, under the reading key, in the reader's tenant.
    reads = AuditLog(store.engine).query(action=AuditAction.read, limit=10_000)
    trajectory_reads = [e for e in reads if e.target.startswith("trajectory:")]
    assert trajectory_reads and all(owner.get(e.target.split(":", 1)[1]) == e.tenant_id for e in trajectory_reads)
    exports = AuditLog(store.engine).query(action=AuditAction.export, limit=10_000)
    assert all(e.tenant_id == datasets[e.target.split(":", 1)[1].split("@")[0]] for e in exports)


def test_dataset_api_errors(client: TestClient) -> None:
    directory: TenantDirectory = client.directory  # type: ignore[attr-defined]
    directory.create_tenant("acme")
    headers = _auth(directory.issue_key("acme").key)
    assert client.post("/v1/datasets", content=b"{not json", headers=headers).status_code == 400
    assert client.post("/v1/datasets", json={"name": "bad name!"}, headers=headers).status_code == 400
    assert (
        client.post("/v1/datasets", json={"name": "d", "quality": ["colour=blue"]}, headers=headers).status_code == 400
    )
    assert client.get("/v1/datasets/missing", headers=headers).status_code == 404
    client.post("/v1/datasets", json={"name": "d"}, headers=headers)
    r = client.get("/v1/datasets/d/export", params={"format": "csv"}, headers=headers)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_format"
    r = client.get("/v1/datasets/d@1/export", params={"format": "parquet"}, headers=headers)
    assert r.status_code == 200 and r.content[:4] == b"PAR1"


def test_governance_wiring_on_the_proxy(store: Store, tmp_path: Path) -> None:
    import time
    from datetime import timedelta

    from evolvable.governance.wiring import Governance
    from evolvable.protocol.models import utcnow
    from evolvable.store import TrajectoryFilter

    config = ProxyConfig(
        upstreams=[UpstreamConfig(name="nowhere", base_url="http://127.0.0.1:9/v1")], spool_dir=tmp_path / "spool"
    )
    # A fresh store without keys: open to the default tenant, as the proxy is without governance.
    open_gov = Governance.for_store(store, admin_key="")
    assert open_gov.authenticator.authenticate(None).tenant_id == "default"
    assert not open_gov.authenticator.authenticate("evk_unknown").is_admin

    directory = TenantDirectory(store.engine)
    directory.create_tenant("acme", retention_days=1)
    key = directory.issue_key("acme").key
    store.put_trajectory(make_trajectory(started_at=utcnow() - timedelta(days=3)))
    gov = Governance.for_store(store, admin_key="", retention_interval_s=0.05)
    assert gov.authenticator.authenticate(None) is None  # keys exist: keys are required
    app = create_app(config, store, governor=gov.governor, authenticator=gov.authenticator, routers=gov.routers)
    gov.install(app)
    with TestClient(app) as c:
        deadline = time.monotonic() + 10
        while store.count(TrajectoryFilter()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.count(TrajectoryFilter()) == 0  # the retention loop ran inside the lifespan
        assert c.get("/v1/trajectories", headers=_auth(key)).status_code == 200
        assert c.get("/v1/trajectories").status_code == 401
    reads = AuditLog(store.engine).query(action=AuditAction.read)
    assert [r.tenant_id for r in reads] == ["acme"]
