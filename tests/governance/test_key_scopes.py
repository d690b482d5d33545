"""Key roles (issue 15): an admin key administers its own tenant only, an operator every tenant; the key
requirement is decided per request; session keys die with their session's end and with the key that
minted them. On the real proxy app and both backends."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evolvable.governance import Governance
from evolvable.governance.tenants import TenantDirectory
from evolvable.proxy.app import create_app
from evolvable.proxy.config import ProxyConfig, UpstreamConfig
from evolvable.proxy.hooks import Principal, Role
from evolvable.store import Store, TrajectoryFilter

from .builders import make_trajectory

OPERATOR_KEY = "operator-key-from-settings"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _app(store: Store, tmp_path: Path, admin_key: str) -> tuple[TestClient, Governance]:
    gov = Governance.for_store(store, admin_key=admin_key, retention_interval_s=3600)
    config = ProxyConfig(
        upstreams=[UpstreamConfig(name="nowhere", base_url="http://127.0.0.1:9/v1")],
        spool_dir=tmp_path / "spool",
        writer_mode="thread",
    )
    app = create_app(config, store, governor=gov.governor, authenticator=gov.authenticator, routers=gov.routers)
    gov.install(app)
    return TestClient(app), gov


@pytest.fixture
def operated(store: Store, tmp_path: Path) -> Iterator[tuple[TestClient, TenantDirectory]]:
    client, gov = _app(store, tmp_path, OPERATOR_KEY)
    with client:
        yield client, gov.directory


def test_an_admin_key_administers_only_its_own_tenant(
    operated: tuple[TestClient, TenantDirectory], store: Store
) -> None:
    client, directory = operated
    op = _auth(OPERATOR_KEY)
    for tenant in ("a", "b"):
        assert client.post("/v1/admin/tenants", json={"id": tenant}, headers=op).status_code == 201
    admin_a = _auth(client.post("/v1/admin/tenants/a/keys", json={"is_admin": True}, headers=op).json()["key"])
    user_b = client.post("/v1/admin/tenants/b/keys", json={"label": "bot"}, headers=op).json()
    for tenant in ("a", "b"):
        store.put_trajectory(make_trajectory(tenant_id=tenant, end_user="bob"))

    assert [t["id"] for t in client.get("/v1/admin/tenants", headers=admin_a).json()["data"]] == ["a"]
    assert [t["id"] for t in client.get("/v1/admin/tenants", headers=op).json()["data"]] == ["a", "b"]
    refused = [
        client.post("/v1/admin/tenants", json={"id": "c"}, headers=admin_a),
        client.post("/v1/admin/tenants/b/keys", json={"is_admin": True}, headers=admin_a),
        client.post("/v1/admin/tenants/a/keys", json={"role": "operator"}, headers=admin_a),
        client.patch("/v1/admin/tenants/b", json={"capture": "off"}, headers=admin_a),
        client.get("/v1/admin/tenants/b/keys", headers=admin_a),
        client.delete(f"/v1/admin/tenants/b/keys/{user_b['key_id']}", headers=admin_a),
        client.post("/v1/admin/purge", json={"tenant_id": "b"}, headers=admin_a),
        client.get("/v1/admin/audit", params={"tenant_id": "b"}, headers=admin_a),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused), [r.text for r in refused]
    assert all(r.json()["error"]["type"] == "permission_error" for r in refused)
    assert directory.get_tenant("b").capture.value == "full"
    assert client.get("/v1/datasets", headers=_auth(user_b["key"])).status_code == 200  # not revoked

    # A purge by end user from an admin stays inside its tenant.
    r = client.post("/v1/admin/purge", json={"end_user": "bob"}, headers=admin_a)
    assert r.status_code == 200 and r.json()["trajectories"] == 1
    assert [h.tenant_id for h in store.iter_trajectories(TrajectoryFilter(end_user="bob"))] == ["b"]
    audit = client.get("/v1/admin/audit", headers=admin_a).json()["data"]
    assert audit and {e["tenant_id"] for e in audit} == {"a"}
    # Within its own tenant an admin still does everything.
    assert client.post("/v1/admin/tenants/a/keys", json={"label": "x"}, headers=admin_a).status_code == 201
    assert client.patch("/v1/admin/tenants/a", json={"retention_days": 7}, headers=admin_a).status_code == 200


def test_an_operator_key_can_be_issued_and_administers_every_tenant(
    operated: tuple[TestClient, TenantDirectory],
) -> None:
    client, directory = operated
    directory.create_tenant("ops")
    directory.create_tenant("z")
    issued = client.post("/v1/admin/tenants/ops/keys", json={"role": "operator"}, headers=_auth(OPERATOR_KEY))
    assert issued.status_code == 201 and issued.json()["role"] == "operator"
    operator = _auth(issued.json()["key"])
    assert client.post("/v1/admin/tenants/z/keys", json={"is_admin": True}, headers=operator).status_code == 201
    assert {t["id"] for t in client.get("/v1/admin/tenants", headers=operator).json()["data"]} == {"ops", "z"}


def test_a_proxy_started_before_any_key_requires_keys_once_one_exists(store: Store, tmp_path: Path) -> None:
    client, _gov = _app(store, tmp_path, "")
    with client:
        assert client.get("/v1/proxy/status").status_code == 200  # no key anywhere: open, tenant default
        elsewhere = TenantDirectory(store.engine, admin_key="")  # e.g. `evolvable tenants` in another process
        elsewhere.create_tenant("acme")
        issued = elsewhere.issue_key("acme", label="first")
        deadline = time.monotonic() + 30
        while client.get("/v1/proxy/status").status_code != 401:
            assert time.monotonic() < deadline, "the proxy stayed open after a key was issued"
            time.sleep(0.2)
        assert client.get("/v1/proxy/status", headers=_auth("evk_made_up")).status_code == 401
        assert client.get("/v1/proxy/status", headers=_auth(issued.key)).status_code == 200


def test_session_keys_die_with_the_key_that_minted_them(operated: tuple[TestClient, TenantDirectory]) -> None:
    client, directory = operated
    directory.create_tenant("acme")
    minting = directory.issue_key("acme", label="agent")
    other = directory.issue_key("acme", label="other")
    session = client.post("/v1/sessions", json={"agent": "bot"}, headers=_auth(minting.key)).json()
    own = f"/v1/trajectories/{session['id']}"
    assert client.get(own, headers=_auth(session["api_key"])).status_code == 200
    directory.revoke_key(minting.key_id)
    r = client.get(own, headers=_auth(session["api_key"]))
    assert r.status_code == 401 and r.json()["error"]["code"] == "session_key_expired"
    assert client.get(own, headers=_auth(other.key)).status_code == 200  # the run itself stays readable


def test_principal_roles_stay_consistent() -> None:
    assert Principal("t", is_admin=True).role == Role.admin
    operator = Principal("t", role=Role.operator)
    assert operator.is_admin and operator.may_administer("other") and operator.may_administer(None)
    admin = Principal("t", role=Role.admin)
    assert admin.may_administer("t") and not admin.may_administer("other") and not admin.may_administer(None)
    assert not Principal("t").may_administer("t")
