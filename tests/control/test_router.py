"""Serving integration: HarnessRouter through the proxy's seam, sticky canary split, policy routing, HTTP API."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient
from tests.control.conftest import AGENT, base_harness

from evolvable.control.api import create_control_router
from evolvable.control.models import DecisionState, Lever, PolicySpec, VersionState
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlPlane
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.harness import MemoryExemplar
from evolvable.protocol.models import ChatMessage
from evolvable.proxy.hooks import RequestRewriter, RewriteResult, SessionContext


def ctx(session: str | None, cluster: str | None = "refund") -> SessionContext:
    return SessionContext(
        tenant_id="default",
        agent=AGENT,
        trajectory_id=f"t-{session}",
        session_id=session,
        endpoint="chat",
        task_input="I want a refund for A-1",
        metadata={"cluster": cluster} if cluster else {},
    )


def with_memory():
    ex = MemoryExemplar(
        id="ex1",
        cluster="refund",
        task_input="refund B-2",
        messages=[
            ChatMessage(role="user", content="refund B-2"),
            ChatMessage(role="assistant", content='{"tool": "lookup_order"}'),
        ],
    )
    return base_harness().model_copy(update={"memory": [ex], "memory_k": 1, "system_prompt": "Evolved prompt."})


def test_router_applies_the_active_harness_and_routes_the_policy(store) -> None:
    plane = ControlPlane(store)
    active, policy = plane.bootstrap(base_harness(), PolicySpec(base_model="smollm2-135m", lora_name="desk-r1"))
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    assert isinstance(router, RequestRewriter)
    body = {
        "model": "desk",
        "messages": [
            {"role": "system", "content": "agent's own"},
            {"role": "user", "content": "I want a refund for A-1"},
        ],
        "tools": [{"type": "function", "function": {"name": "lookup_order", "description": "old"}}],
    }
    result = router.prepare(ctx("s1"), body)
    assert isinstance(result, RewriteResult)
    assert result.harness_version == active.id and result.policy_version == policy.id
    assert result.model == "desk-r1" and result.body["model"] == "desk-r1"
    assert result.body["messages"][0] == {
        "role": "system",
        "content": base_harness().system_prompt.strip() + "\n\nTools:\n- lookup_order(order_id): Look up an order.",
    }
    assert result.body["tools"][0]["function"]["description"] == "Look up an order."
    unknown = SessionContext(tenant_id="default", agent="other", trajectory_id="t", session_id="s", endpoint="chat")
    assert router.prepare(unknown, body).body is body  # unregistered agents pass through untouched


def test_canary_share_is_sticky_per_session_and_memory_is_retrieved_by_cluster(store) -> None:
    plane = ControlPlane(store)
    active, _ = plane.bootstrap(base_harness())
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    before = {f"old-{i}": router.assign(AGENT, f"old-{i}").harness_version for i in range(50)}
    cand = plane.registry.register_harness(with_memory())
    plane.registry.start_canary(cand.id)
    plane.journal.start_rollout(AGENT, cand.kind, cand.id, active.id, 0.3, None)
    router.refresh()
    assert all(router.assign(AGENT, s).harness_version == v for s, v in before.items())  # sessions under way stay
    picks = [router.assign(AGENT, f"new-{i}").harness_version for i in range(400)]
    share = picks.count(cand.id) / len(picks)
    assert 0.2 < share < 0.4
    assert [router.assign(AGENT, f"new-{i}").harness_version for i in range(400)] == picks  # sticky
    canary_session = next(f"new-{i}" for i, p in enumerate(picks) if p == cand.id)
    result = router.prepare(ctx(canary_session), {"model": "m", "messages": [{"role": "user", "content": "refund"}]})
    roles = [m["role"] for m in result.body["messages"]]
    assert result.harness_version == cand.id and roles == ["system", "user", "assistant", "user"]
    assert result.body["messages"][1]["content"] == "refund B-2"
    pinned = ctx(canary_session)
    pinned.harness_version = active.id  # the proxy pinned the session to the active version at its first call
    assert router.prepare(pinned, {"model": "m", "messages": []}).harness_version == active.id


def test_http_api(store) -> None:
    plane = ControlPlane(store)
    active, _ = plane.bootstrap(base_harness())
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    plane.router = router
    directory = TenantDirectory(store.engine)
    admin_key = directory.init_admin().key
    reader_key = directory.issue_key("default", label="reader").key
    app = FastAPI()
    app.include_router(create_control_router(plane, router, authenticator=directory))
    client = TestClient(app, headers={"Authorization": f"Bearer {reader_key}"})
    got = client.get(f"/v1/agents/{AGENT}/harness", params={"session": "x"}).json()
    assert got["harness_version"] == active.id and got["harness"]["agent"] == AGENT
    assert client.get("/v1/agents/nobody/harness").status_code == 404
    assert client.get("/v1/control/status").json()[AGENT]["harness"]["active"] == active.id
    assert client.get("/v1/control/status", headers={"Authorization": ""}).status_code == 401
    cand = plane.registry.register_harness(with_memory())
    decision = plane.journal.record_decision(
        AGENT, Lever.memory, state=DecisionState.awaiting_approval, requires_approval=True
    )
    plane.journal.update_decision(
        decision.id, candidate_kind=cand.kind, candidate_version=cand.id, baseline_version=active.id
    )
    assert client.get("/v1/control/decisions").json()["data"][0]["id"] == decision.id
    assert client.post(f"/v1/control/decisions/{decision.id}/approve").status_code == 403
    auth = {"Authorization": f"Bearer {admin_key}"}
    approved = client.post(f"/v1/control/decisions/{decision.id}/approve", headers=auth).json()
    assert approved["state"] == "canary" and approved["approved_by"].startswith("key_")
    rollout_id = approved["rollout_id"]
    promoted = client.post(f"/v1/control/rollouts/{rollout_id}/promote", headers=auth).json()
    assert promoted["state"] == "promoted"
    assert plane.registry.get(cand.id).state == VersionState.active
    again = client.post(f"/v1/control/rollouts/{rollout_id}/promote", headers=auth)
    assert again.status_code == 409 and "error" in again.json()
    rolled = client.post(f"/v1/control/rollouts/{rollout_id}/rollback", headers=auth).json()
    assert rolled["state"] == "rolled_back"
    assert plane.registry.get(active.id).state == VersionState.active  # restored in one step
    assert client.post("/v1/control/rollouts/nope/rollback", headers=auth).status_code == 404


def test_the_control_router_runs_the_plane_for_the_apps_lifetime(sqlite_store) -> None:
    import time

    plane = ControlPlane(sqlite_store)
    plane.bootstrap(base_harness())
    ticks: list[object] = []
    original = plane.tick
    plane.tick = lambda agent=None: ticks.append(original(agent)) or ticks[-1]  # type: ignore[method-assign]
    router = HarnessRouter(sqlite_store.engine, refresh_interval_s=3600)
    app = FastAPI()
    directory = TenantDirectory(sqlite_store.engine)
    app.include_router(create_control_router(plane, router, authenticator=directory, tick_interval_s=0.05))
    key = directory.init_admin().key
    with TestClient(app, headers={"Authorization": f"Bearer {key}"}) as client:
        deadline = time.monotonic() + 20
        while len(ticks) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("/v1/control/status").status_code == 200
    assert len(ticks) >= 2 and all(t.leader for t in ticks)
    count = len(ticks)
    time.sleep(0.2)
    assert len(ticks) == count  # stopped with the app
