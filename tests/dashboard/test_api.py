"""The dashboard's JSON API: keys, tenant isolation, feedback as signals, the annotation queue, control actions."""

from __future__ import annotations

import httpx
import pytest
from tests.dashboard.stack import ADMIN_KEY, AGENT, admin, bootstrap_agent, record_run, tenant_key

from evolvable.control.models import DecisionState, Lever
from evolvable.control.tenancy import ControlPlanes
from evolvable.protocol.harness import Harness

DATA_GETS = [
    "/v1/dashboard/me",
    "/v1/dashboard/runs",
    "/v1/dashboard/runs/{run}",
    "/v1/dashboard/annotations",
    "/v1/dashboard/control",
    "/v1/dashboard/learning",
    "/v1/control/status",
    "/v1/control/decisions",
    f"/v1/agents/{AGENT}/harness",
    "/v1/trajectories",
    "/v1/trajectories/{run}",
    "/v1/admin/tenants",
    "/v1/admin/audit",
    "/v1/datasets",
]


def get(url: str, path: str, key: str | None, **params: object) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.get(url + path, headers=headers, params=params, timeout=30)


def test_every_data_endpoint_is_401_without_a_valid_key(stack) -> None:
    server, plane = stack
    bootstrap_agent(plane)
    key_of_acme = tenant_key(server.url, "acme")
    run = record_run(server.url, key_of_acme)
    for key in (None, "not-a-key", "evk_forged", "evs_forged"):
        for path in DATA_GETS:
            got = get(server.url, path.format(run=run), key)
            assert got.status_code == 401, (path, key, got.text)
            assert "error" in got.json()
        feedback = httpx.post(f"{server.url}/v1/dashboard/runs/{run}/feedback", json={"rating": "up"}, timeout=30)
        assert feedback.status_code == 401
    session = httpx.post(
        f"{server.url}/v1/sessions",
        json={"agent": AGENT},
        headers={"authorization": f"Bearer {key_of_acme}"},
        timeout=30,
    ).json()
    for path in ("/v1/dashboard/me", "/v1/dashboard/runs", "/v1/dashboard/control"):
        assert get(server.url, path, session["api_key"]).status_code == 401  # agents' session keys are not people
    page = httpx.get(f"{server.url}/ui/", timeout=30)  # the page itself is public: it holds no data
    assert page.status_code == 200 and 'name="key"' in page.text


def test_a_tenant_key_sees_only_its_tenant(stack) -> None:
    server, plane = stack
    planes = ControlPlanes.single(plane)  # control is per (tenant, agent): each tenant's own versions
    for tenant, agent in (("a", "desk-a"), ("b", "desk-b"), ("a", "shared"), ("b", "shared")):
        bootstrap_agent(planes.plane(tenant), agent)
    key_a, key_b = tenant_key(server.url, "a"), tenant_key(server.url, "b")
    run_a = record_run(server.url, key_a, agent="desk-a", judge=0.5)
    run_b = record_run(server.url, key_b, agent="desk-b", judge=0.5)
    record_run(server.url, key_a, agent="shared")
    shared_b = record_run(server.url, key_b, agent="shared")

    listed = get(server.url, "/v1/dashboard/runs", key_a).json()["data"]
    assert {r["tenant_id"] for r in listed} == {"a"} and run_a in {r["id"] for r in listed}
    for path in (f"/v1/dashboard/runs/{run_b}", f"/v1/dashboard/runs/{shared_b}", f"/v1/trajectories/{run_b}"):
        assert get(server.url, path, key_a).status_code == 404
    assert (
        httpx.post(
            f"{server.url}/v1/dashboard/runs/{run_b}/feedback",
            json={"rating": "down"},
            headers={"authorization": f"Bearer {key_a}"},
            timeout=30,
        ).status_code
        == 404
    )
    assert get(server.url, "/v1/dashboard/runs", key_a, tenant="b").json()["data"] == listed  # cannot widen
    queue = get(server.url, "/v1/dashboard/annotations", key_a).json()["data"]
    assert [q["trajectory_id"] for q in queue] == [run_a]
    # Control and learning: only the tenant's own control plane (its desk-a and its own `shared`, not desk-b).
    control_a = get(server.url, "/v1/dashboard/control", key_a).json()["data"]
    assert sorted(a["agent"] for a in control_a) == ["desk-a", "shared"] and {a["tenant"] for a in control_a} == {"a"}
    learning_a = get(server.url, "/v1/dashboard/learning", key_a).json()["data"]
    assert sorted(a["agent"] for a in learning_a) == ["desk-a", "shared"]
    assert sorted(get(server.url, "/v1/control/status", key_a).json()) == ["desk-a", "shared"]
    assert get(server.url, "/v1/dashboard/control", key_a, agent="desk-b").status_code == 404
    assert get(server.url, "/v1/agents/desk-b/harness", key_a).status_code == 404
    assert get(server.url, "/v1/admin/tenants", key_a).status_code == 403
    learning = next(a for a in learning_a if a["agent"] == "desk-a")
    assert {r["id"] for r in learning["runs"]} == {run_a}
    shared = next(a for a in learning_a if a["agent"] == "shared")
    assert shared_b not in {r["id"] for r in shared["runs"]}  # tenant b's runs of its own `shared` stay b's

    everything = get(server.url, "/v1/dashboard/runs", ADMIN_KEY).json()["data"]
    assert {r["tenant_id"] for r in everything} == {"a", "b"}
    only_b = get(server.url, "/v1/dashboard/runs", ADMIN_KEY, tenant="b").json()["data"]
    assert {r["tenant_id"] for r in only_b} == {"b"}
    admin_view = get(server.url, "/v1/dashboard/control", ADMIN_KEY).json()["data"]
    assert sorted((a["tenant"], a["agent"]) for a in admin_view) == [
        ("a", "desk-a"),
        ("a", "shared"),
        ("b", "desk-b"),
        ("b", "shared"),
    ]


def test_feedback_is_stored_as_a_user_feedback_signal(stack) -> None:
    server, _ = stack
    key = tenant_key(server.url, "acme")
    run = record_run(server.url, key)
    auth = {"authorization": f"Bearer {key}"}
    me = get(server.url, "/v1/dashboard/me", key).json()
    detail = get(server.url, f"/v1/dashboard/runs/{run}", key).json()
    tool_step = next(s for s in detail["trajectory"]["steps"] if s["kind"] == "tool_call")
    assert tool_step["arguments"] == {"email": "<EMAIL_1>"}  # redacted before storage, shown as a placeholder

    posted = httpx.post(
        f"{server.url}/v1/dashboard/runs/{run}/feedback",
        json={"rating": "down", "comment": "wrong order, mail me at bob@example.org", "step_id": tool_step["id"]},
        headers=auth,
        timeout=30,
    )
    assert posted.status_code == 201, posted.text
    # Read back through the ordinary trajectory API, as any client would.
    signals = get(server.url, f"/v1/trajectories/{run}", key).json()["signals"]
    feedback = [s for s in signals if s["kind"] == "user_feedback"]
    assert len(feedback) == 1
    assert feedback[0]["id"] == posted.json()["signal_id"]
    assert feedback[0]["value"] == 0.0 and feedback[0]["step_id"] == tool_step["id"]
    assert feedback[0]["metadata"]["key_id"] == me["key_id"] and me["key_id"]
    assert "bob@example.org" not in feedback[0]["metadata"]["comment"]  # governance redacted the comment

    for body, status in (({"rating": "meh"}, 400), ({"rating": "up", "step_id": "step_nope"}, 404), ({}, 400)):
        bad = httpx.post(f"{server.url}/v1/dashboard/runs/{run}/feedback", json=body, headers=auth, timeout=30)
        assert bad.status_code == status, bad.text
        assert "error" in bad.json()


def test_the_annotation_queue_holds_runs_the_judge_was_unsure_about(stack) -> None:
    server, _ = stack
    key = tenant_key(server.url, "acme")
    middling = record_run(server.url, key, judge=0.5)
    unsure = record_run(server.url, key, judge=0.9, judge_confidence=0.3)
    record_run(server.url, key, judge=0.95, judge_confidence=0.95)
    queue = get(server.url, "/v1/dashboard/annotations", key).json()["data"]
    assert {q["trajectory_id"] for q in queue} == {middling, unsure}
    httpx.post(
        f"{server.url}/v1/dashboard/runs/{middling}/feedback",
        json={"rating": "up"},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ).raise_for_status()
    assert [q["trajectory_id"] for q in get(server.url, "/v1/dashboard/annotations", key).json()["data"]] == [unsure]


@pytest.mark.parametrize("action", ["approve"])
def test_control_actions_need_an_admin_key_and_are_audited(stack, action: str) -> None:
    server, default_plane = stack
    plane = ControlPlanes.single(default_plane).plane("acme")  # the tenant's own control plane
    bootstrap_agent(plane)
    active = plane.registry.current(AGENT, *_harness_active())
    key = tenant_key(server.url, "acme")
    record_run(server.url, key)
    candidate = plane.registry.register_harness(Harness(agent=AGENT, system_prompt="Be brief."))
    decision = plane.journal.record_decision(
        AGENT, Lever.prompt, state=DecisionState.awaiting_approval, requires_approval=True
    )
    plane.journal.update_decision(
        decision.id, candidate_kind=candidate.kind, candidate_version=candidate.id, baseline_version=active.id
    )
    path = f"{server.url}/v1/control/decisions/{decision.id}/approve"
    assert httpx.post(path, timeout=30).status_code == 401
    assert httpx.post(path, headers={"authorization": f"Bearer {key}"}, timeout=30).status_code == 403
    with admin(server.url) as client:
        issued = client.post("/v1/admin/tenants/acme/keys", json={"label": "ops", "is_admin": True}).json()
    approved = httpx.post(path, headers={"authorization": f"Bearer {issued['key']}"}, timeout=30)
    assert approved.status_code == 200, approved.text
    assert approved.json()["approved_by"] == issued["key_id"]
    control = get(server.url, "/v1/dashboard/control", issued["key"]).json()
    assert control["can_act"] is True
    versions = control["data"][0]["versions"]["harness"]
    shown = next(v for v in versions if v["id"] == candidate.id)
    assert "Be brief." in shown["diff_from_active"] and shown["lineage_chain"][0] == candidate.id
    with admin(server.url) as client:
        audit = client.get("/v1/admin/audit", params={"action": "control_action"}).json()["data"]
    assert [(e["actor"], e["target"]) for e in audit] == [(issued["key_id"], f"approve:{decision.id}")]


def test_reading_one_run_in_the_dashboard_is_audited(stack) -> None:
    server, _ = stack
    key = tenant_key(server.url, "acme")
    run = record_run(server.url, key)
    me = get(server.url, "/v1/dashboard/me", key).json()
    assert get(server.url, f"/v1/dashboard/runs/{run}", key).status_code == 200
    with admin(server.url) as client:
        reads = client.get("/v1/admin/audit", params={"action": "read", "tenant_id": "acme"}).json()["data"]
    assert (me["key_id"], f"trajectory:{run}") in {(e["actor"], e["target"]) for e in reads}


def _harness_active():
    from evolvable.control.models import VersionKind, VersionState

    return VersionKind.harness, VersionState.active


def test_without_a_control_plane_the_pages_stay_authenticated_and_empty(upstream, tmp_path) -> None:
    from tests.proxy.conftest import ProxyServer, make_config

    from evolvable.dashboard import install_dashboard
    from evolvable.governance import Governance
    from evolvable.proxy.app import create_app
    from evolvable.store import Store

    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        gov = Governance.for_store(store, admin_key=ADMIN_KEY)
        app = create_app(
            make_config(upstream.url, tmp_path / "spool"),
            store,
            governor=gov.governor,
            authenticator=gov.authenticator,
            routers=gov.routers,
        )
        install_dashboard(app, plane=None)
        server = ProxyServer(app).start()
        try:
            assert get(server.url, "/v1/dashboard/control", None).status_code == 401
            control = get(server.url, "/v1/dashboard/control", ADMIN_KEY).json()
            assert control["data"] == [] and control["control_plane"] is False
            assert get(server.url, "/v1/dashboard/learning", ADMIN_KEY).json()["data"] == []
            assert get(server.url, "/v1/dashboard/runs", ADMIN_KEY).status_code == 200
        finally:
            server.stop()
