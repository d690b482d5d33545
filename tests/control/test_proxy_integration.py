"""The control plane inside the real proxy: the harness is applied to live traffic, the trajectory
records the version it ran under, and the control API is served next to the OpenAI endpoints."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import uvicorn
from tests.workloads.mock_openai import MockOpenAI
from tests.workloads.proxy_helpers import wait_for_store

from evolvable.control import ControlPlane, HarnessRouter, PolicySpec, create_control_router
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.harness import MemoryExemplar
from evolvable.protocol.models import ChatMessage
from evolvable.proxy.app import create_app
from evolvable.proxy.config import ProxyConfig, UpstreamConfig
from evolvable.store import Store
from evolvable.workloads.support_desk.agent import run_episode
from evolvable.workloads.support_desk.harnesses import oracle_exemplars, oracle_outputs, weak_harness
from evolvable.workloads.support_desk.tasks import generate_tasks


@contextmanager
def proxy_with_control(upstream: str, store: Store, tmp_path, router, plane) -> Iterator[tuple[str, object]]:
    config = ProxyConfig(
        upstreams=[UpstreamConfig(name="up", base_url=upstream, timeout_s=60.0)],
        default_upstream="up",
        spool_dir=tmp_path / "spool",
        writer_mode="thread",
    )
    control = create_control_router(plane, router, authenticator=TenantDirectory(store.engine))
    app = create_app(config, store, rewriter=router, routers=[control])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "proxy did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", app.state.proxy
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def test_proxy_applies_the_active_harness_and_records_its_version(tmp_path) -> None:
    task = generate_tasks("train", 1, seed=5, intents=["order_status"])[0]
    outputs = oracle_outputs(task)
    example = generate_tasks("train", 1, seed=6, intents=["order_status"])[0]
    exemplar = MemoryExemplar(
        id="ex1",
        cluster="order_status",
        task_input=example.prompt(),
        messages=[ChatMessage(role="user", content=example.prompt()), ChatMessage(role="assistant", content="ok")],
    )
    harness = weak_harness().model_copy(update={"memory": [exemplar], "memory_k": 1, "system_prompt": "EVOLVED."})

    def respond(messages):
        turn = sum(1 for m in messages if m["role"] == "assistant") - 1  # minus the exemplar's answer
        return outputs[min(max(turn, 0), len(outputs) - 1)]

    store = Store.open(f"sqlite:///{tmp_path / 'p.db'}")
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    plane = ControlPlane(store, router=router)
    active, policy = plane.bootstrap(harness, PolicySpec(base_model="mock", lora_name="desk-lora"))
    try:
        with (
            MockOpenAI(respond) as upstream,
            proxy_with_control(upstream.base_url, store, tmp_path, router, plane) as (url, runtime),
        ):
            client = openai.OpenAI(base_url=url, api_key="x")
            result = run_episode(client, "smollm2", task, None, proxy_session=True, apply_harness="proxy")
            assert result.success, result.verdict
            first = upstream.chat_requests[0]
            assert first["model"] == "desk-lora"  # the alias was routed to the active policy version
            assert first["messages"][0]["role"] == "system" and first["messages"][0]["content"].startswith("EVOLVED.")
            assert first["messages"][1]["content"] == example.prompt()  # memory retrieved by cluster
            wait_for_store(runtime)
            stored = store.get_trajectory(result.session_id)
            assert stored.harness_version == active.id and stored.policy_version == policy.id
            base = url.removesuffix("/v1")
            auth = {"Authorization": f"Bearer {TenantDirectory(store.engine).init_admin().key}"}
            got = httpx.get(f"{base}/v1/agents/support-desk/harness", headers=auth).json()
            assert got["harness_version"] == active.id
            assert httpx.get(f"{base}/v1/control/status").status_code == 401
            status = httpx.get(f"{base}/v1/control/status", headers=auth).json()
            assert status["support-desk"]["runs"] == 1 and status["support-desk"]["success_rate"] == 1.0
    finally:
        store.close()


def test_sessions_opened_at_the_proxy_split_between_active_and_canary(tmp_path) -> None:
    """`POST /v1/sessions` pins each session's versions by its own id: a 50% canary gets about half of them
    (before the fix, sessions were pinned before they had an id, and every one got the active version)."""
    store = Store.open(f"sqlite:///{tmp_path / 'c.db'}")
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    plane = ControlPlane(store, router=router)
    active, _ = plane.bootstrap(weak_harness())
    candidate = plane.registry.register_harness(weak_harness().model_copy(update={"system_prompt": "CANARY."}))
    plane.registry.start_canary(candidate.id)
    plane.journal.start_rollout("support-desk", candidate.kind, candidate.id, active.id, 0.5, None)
    router.refresh()
    try:
        with (
            MockOpenAI(lambda messages: "ok") as upstream,
            proxy_with_control(upstream.base_url, store, tmp_path, router, plane) as (url, _),
        ):
            pinned = [
                httpx.post(f"{url}/sessions", json={"agent": "support-desk", "task_id": f"t{i}"}).json()
                for i in range(40)
            ]
    finally:
        store.close()
    versions = [p["harness_version"] for p in pinned]
    assert set(versions) == {active.id, candidate.id}
    assert 8 <= versions.count(candidate.id) <= 32
    from evolvable.control.router import bucket

    assert all((bucket(p["id"]) < 0.5) == (p["harness_version"] == candidate.id) for p in pinned)


def test_exemplar_placeholders_reach_the_upstream_as_the_live_tickets_own_values(tmp_path) -> None:
    """A redacted exemplar (`reset_password {"email": "<EMAIL_1>"}`) is shown with the live ticket's email, by
    the proxy and by the agent applying the harness itself alike; the exemplar's own customer never appears."""
    from evolvable.app.redaction import exemplar_redactor
    from evolvable.governance.redaction import live_values_function

    task = generate_tasks("train", 1, seed=5, intents=["password_reset"])[0]
    example = generate_tasks("train", 1, seed=6, intents=["password_reset"])[0]
    assert task.customer.email != example.customer.email
    exemplar = exemplar_redactor()(oracle_exemplars([example])[0])
    assert exemplar.messages[1].text() == '{"tool": "reset_password", "args": {"email": "<EMAIL_1>"}}'
    harness = weak_harness().model_copy(update={"memory": [exemplar], "memory_k": 1})
    outputs = oracle_outputs(task)

    def respond(messages):
        turn = sum(1 for m in messages if m["role"] == "assistant") - 1  # minus the exemplar's action
        return outputs[min(max(turn, 0), len(outputs) - 1)]

    store = Store.open(f"sqlite:///{tmp_path / 'v.db'}")
    router = HarnessRouter(store.engine, refresh_interval_s=3600, live_values=live_values_function())
    plane = ControlPlane(store, router=router)
    plane.bootstrap(harness)
    try:
        with (
            MockOpenAI(respond) as upstream,
            proxy_with_control(upstream.base_url, store, tmp_path, router, plane) as (url, _),
        ):
            proxied = run_episode(
                openai.OpenAI(base_url=url, api_key="x"), "m", task, None, proxy_session=True, apply_harness="proxy"
            )
            first_direct = len(upstream.chat_requests)
            direct = run_episode(openai.OpenAI(base_url=upstream.base_url, api_key="x"), "m", task, harness)
            assert proxied.success and direct.success
            via_proxy = upstream.chat_requests[0]["messages"]
            via_agent = upstream.chat_requests[first_direct]["messages"]
    finally:
        store.close()
    shown = via_proxy[2]["content"]  # the exemplar's first action, the turn the model copies
    assert shown == f'{{"tool": "reset_password", "args": {{"email": "{task.customer.email}"}}}}'
    assert via_proxy[1]["content"] == exemplar.messages[0].text()  # the exemplar's ticket keeps its placeholders
    text = str(via_proxy)
    assert example.customer.email not in text and example.customer.name not in text
    assert via_agent == via_proxy  # client mode renders what the proxy serves
