"""A whole `evolvable serve` stack in-process (governance, control plane, dashboard) and runs to look at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI
from tests.proxy.conftest import ProxyServer, make_config

from evolvable.control import ControlPlane, HarnessRouter, create_control_router
from evolvable.dashboard import install_dashboard
from evolvable.governance import Governance
from evolvable.protocol.harness import Harness
from evolvable.proxy.app import create_app
from evolvable.store import Store

ADMIN_KEY = "dash-admin-key-0123456789"
AGENT = "desk"


def start_stack(store: Store, upstream_url: str, spool_dir: Path, **config: Any) -> tuple[ProxyServer, ControlPlane]:
    """What `evolvable serve` builds, with an admin key, on a thread (the writer forks as in production)."""
    gov = Governance.for_store(store, admin_key=ADMIN_KEY)
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    plane = ControlPlane(store, router=router)
    control = create_control_router(plane, router, authenticator=gov.directory, on_action=gov.audit_control_action)
    app = create_app(
        make_config(upstream_url, spool_dir, **config),
        store,
        governor=gov.governor,
        authenticator=gov.authenticator,
        rewriter=router,
        routers=[*gov.routers, control],
    )
    install_dashboard(app, plane=plane)
    gov.install(app)
    return ProxyServer(app).start(), plane


def bootstrap_agent(plane: ControlPlane, agent: str = AGENT) -> None:
    plane.bootstrap(Harness(agent=agent, system_prompt=f"You are the {agent} agent."))


def admin(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=30)


def tenant_key(url: str, tenant: str) -> str:
    with admin(url) as client:
        client.post("/v1/admin/tenants", json={"id": tenant}).raise_for_status()
        issued = client.post(f"/v1/admin/tenants/{tenant}/keys", json={"label": "ui"})
        issued.raise_for_status()
        return issued.json()["key"]


def record_run(
    url: str,
    key: str,
    *,
    agent: str = AGENT,
    text: str = "Where is my order? Mail jane.doe@example.com",
    cluster: str = "orders",
    outcome: float = 1.0,
    judge: float | None = None,
    judge_confidence: float = 1.0,
    end: bool = True,
) -> str:
    """One run through the proxy: a session, a real `openai` chat call, a tool step, signals, the end."""
    headers = {"authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        created = client.post(
            "/v1/sessions", json={"agent": agent, "task_input": {"text": text}, "metadata": {"cluster": cluster}}
        )
        created.raise_for_status()
        session = created.json()
        llm = OpenAI(base_url=f"{url}/v1", api_key=session["api_key"], max_retries=0)
        llm.chat.completions.create(model="alias-a", messages=[{"role": "user", "content": text}])
        client.post(
            f"/v1/sessions/{session['id']}/steps",
            json={
                "kind": "tool_call",
                "tool_name": "lookup_order",
                "arguments": {"email": "jane.doe@example.com"},
                "result": {"status": "shipped"},
                "status": "ok",
                "latency_ms": 12.5,
            },
        ).raise_for_status()
        if not end:
            return session["id"]
        signals: list[dict[str, Any]] = [{"kind": "outcome", "value": outcome, "source": "verifier"}]
        if judge is not None:
            signals.append(
                {
                    "kind": "judge",
                    "value": judge,
                    "confidence": judge_confidence,
                    "source": "judge-model",
                    "label": "unsure",
                }
            )
        client.post(f"/v1/sessions/{session['id']}/signals", json={"signals": signals}).raise_for_status()
        client.post(
            f"/v1/sessions/{session['id']}/end", json={"status": "completed", "outcome": outcome}
        ).raise_for_status()
        return session["id"]
