"""The control API under random access: tenant keys read only their tenant, another tenant's objects are 404,
writes need an admin key, no key is 401. On SQLite and PostgreSQL, with keys from the real directory."""

from __future__ import annotations

import random

from fastapi import FastAPI
from fastapi.testclient import TestClient

from evolvable.control.api import create_control_router
from evolvable.control.models import DecisionState, Lever, VersionKind, VersionState
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlPlane
from evolvable.control.tenancy import ControlPlanes
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.harness import Harness

from .conftest import AGENT, base_harness

TENANTS = ("acme", "globex", "initech")


def _seed(store) -> tuple[ControlPlanes, dict[str, str], dict[str, str]]:
    """Each tenant: the same agent name bootstrapped, a decision awaiting approval with a candidate."""
    planes = ControlPlanes.single(ControlPlane(store))
    decisions: dict[str, str] = {}
    active: dict[str, str] = {}
    for tenant in TENANTS:
        plane = planes.plane(tenant)
        record, _ = plane.bootstrap(base_harness().model_copy(update={"system_prompt": f"{tenant} prompt"}))
        active[tenant] = record.id
        cand = plane.registry.register_harness(
            base_harness().model_copy(update={"system_prompt": f"{tenant} better prompt"})
        )
        d = plane.journal.record_decision(AGENT, Lever.prompt, state=DecisionState.awaiting_approval)
        plane.journal.update_decision(
            d.id, candidate_kind=VersionKind.harness, candidate_version=cand.id, baseline_version=record.id
        )
        decisions[d.id] = tenant
    return planes, decisions, active


def test_control_api_tenant_isolation_under_random_access(store) -> None:
    rng = random.Random(20261125)
    planes, decisions, active = _seed(store)
    directory = TenantDirectory(store.engine)
    readers: dict[str, str] = {}
    for tenant in TENANTS:
        directory.create_tenant(tenant)
        readers[tenant] = directory.issue_key(tenant, label="reader").key
    operator = directory.issue_key(TENANTS[0], label="operator", role="operator").key
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    app = FastAPI()
    app.include_router(create_control_router(planes, router, authenticator=directory))
    client = TestClient(app)
    ids = [*decisions, "dec_does_not_exist"]
    for _ in range(150):
        tenant = rng.choice(TENANTS)
        auth = {"Authorization": f"Bearer {readers[tenant]}"}
        op = rng.choice(["harness", "status", "list", "get", "approve", "foreign", "nokey"])
        if op == "harness":
            got = client.get(f"/v1/agents/{AGENT}/harness", headers=auth)
            assert got.status_code == 200 and got.json()["harness_version"] == active[tenant]
            assert got.json()["harness"]["system_prompt"] == f"{tenant} prompt"
        elif op == "status":
            got = client.get("/v1/control/status", headers=auth).json()
            assert got[AGENT]["harness"]["active"] == active[tenant]
        elif op == "list":
            got = client.get("/v1/control/decisions", headers=auth).json()["data"]
            assert {d["id"] for d in got} == {d for d, t in decisions.items() if t == tenant}
            assert all(d["tenant"] == tenant for d in got)
        elif op == "get":
            did = rng.choice(ids)
            got = client.get(f"/v1/control/decisions/{did}", headers=auth)
            if decisions.get(did) == tenant:
                assert got.status_code == 200 and got.json()["tenant"] == tenant
            else:
                assert got.status_code == 404, (did, tenant)
                assert got.json()["error"]["code"] == "not_found"
        elif op == "approve":
            did = rng.choice(ids)
            got = client.post(f"/v1/control/decisions/{did}/approve", headers=auth)
            assert got.status_code == (403 if decisions.get(did) == tenant else 404), got.text
        elif op == "foreign":
            other = rng.choice([t for t in TENANTS if t != tenant])
            assert client.get("/v1/control/status", params={"tenant": other}, headers=auth).status_code == 404
            assert client.get("/v1/control/decisions", params={"tenant": other}, headers=auth).status_code == 404
        else:
            assert client.get("/v1/control/decisions").status_code == 401
            bad = client.get("/v1/control/status", headers={"Authorization": "Bearer evk_not-a-key"})
            assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_api_key"
    # The operator (an admin key) acts on any tenant; the decision stays in its tenant.
    did = next(d for d, t in decisions.items() if t == "globex")
    approved = client.post(f"/v1/control/decisions/{did}/approve", headers={"Authorization": f"Bearer {operator}"})
    assert approved.status_code == 200 and approved.json()["state"] == "canary"
    assert planes.plane("globex").registry.current(AGENT, VersionKind.harness, VersionState.canary) is not None
    assert planes.plane("acme").registry.current(AGENT, VersionKind.harness, VersionState.canary) is None


def test_tenants_with_equal_harnesses_get_separate_versions(store) -> None:
    planes = ControlPlanes.single(ControlPlane(store))
    a, _ = planes.plane("acme").bootstrap(base_harness())
    b, _ = planes.plane("globex").bootstrap(base_harness())
    assert a.id != b.id and a.tenant == "acme" and b.tenant == "globex"
    assert planes.plane("globex").registry.get(b.id).state == VersionState.active
    assert planes.plane("acme").registry.versions() == [planes.plane("acme").registry.get(a.id)]


def test_register_needs_an_admin_key_and_stays_in_the_callers_tenant(store) -> None:
    planes = ControlPlanes.single(ControlPlane(store))
    planes.plane("acme").bootstrap(base_harness())
    directory = TenantDirectory(store.engine)
    directory.create_tenant("acme")
    reader = directory.issue_key("acme").key
    admin = directory.issue_key("acme", is_admin=True).key
    app = FastAPI()
    app.include_router(create_control_router(planes, None, authenticator=directory))
    client = TestClient(app)
    body = Harness(agent=AGENT, system_prompt="registered").model_dump_json()
    url = f"/v1/agents/{AGENT}/harness"
    assert client.post(url, content=body, headers={"Authorization": f"Bearer {reader}"}).status_code == 403
    assert client.post(url, content=body).status_code == 401
    wrong = client.post("/v1/agents/other/harness", content=body, headers={"Authorization": f"Bearer {admin}"})
    assert wrong.status_code == 400
    made = client.post(url, content=body, params={"activate": "true"}, headers={"Authorization": f"Bearer {admin}"})
    assert made.status_code == 200 and made.json()["state"] == "active"
    assert made.json()["tenant"] == "acme"


def test_statistics_and_exemplars_never_cross_tenants(store) -> None:
    from tests.control.conftest import CLUSTERS, make_trajectory

    from evolvable.control.decision import DecisionConfig
    from evolvable.control.runtime import ControlConfig

    planes = ControlPlanes.single(ControlPlane(store))
    cfg = ControlConfig(
        decision=DecisionConfig(levers=frozenset({Lever.memory}), min_runs=12, min_cluster_runs=2), use_canary=False
    )
    acme, globex = planes.plane("acme"), planes.plane("globex")
    acme.config = globex.config = cfg
    a_active, _ = acme.bootstrap(base_harness())
    g_active, _ = globex.bootstrap(base_harness())
    acme_ids = set()
    for i in range(24):
        ok = i % 2 == 0  # acme has successes to harvest in every cluster; globex has none
        a = make_trajectory(cluster=CLUSTERS[i % 3], success=ok, harness_version=a_active.id, task_text=f"acme {i}")
        g = make_trajectory(
            cluster=CLUSTERS[i % 3], success=False, harness_version=g_active.id, task_text=f"globex {i}"
        )
        a.tenant_id, g.tenant_id = "acme", "globex"
        store.put_trajectory(a)
        store.put_trajectory(g)
        acme_ids.add(a.id)
    assert globex.status()[AGENT]["runs"] == 24 and globex.status()[AGENT]["success_rate"] == 0.0
    report = globex.tick()
    for d in report.decisions:
        cand = globex.journal.decision(d).candidate_version
        if cand:
            memory = globex.registry.get(cand).harness().memory
            assert not {ex.source_trajectory_id for ex in memory} & acme_ids
    assert not any("acme" in line for line in report.actions)
    report = acme.tick()
    decision = acme.journal.decision(report.decisions[0])
    memory = acme.registry.get(decision.candidate_version).harness().memory
    assert memory and {ex.source_trajectory_id for ex in memory} <= acme_ids  # its own runs only
