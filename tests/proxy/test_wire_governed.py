"""Governance applies to wire calls as to chat: tenant keys work as `x-api-key` (Anthropic) and bearer
(OpenAI), and what is stored from Messages / Responses calls is redacted, tool results included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from tests.proxy.conftest import ProxyServer
from tests.proxy.mock_upstream import MockUpstream

from evolvable.governance import Governance
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.models import LLMCallStep, ToolCallStep
from evolvable.proxy.app import create_app
from evolvable.proxy.config import ProxyConfig, UpstreamConfig
from evolvable.store import Store, TrajectoryFilter

EMAIL = "jane.roe@example.com"


@pytest.fixture
def governed(upstream: MockUpstream, store: Store, tmp_path: Path) -> Iterator[tuple[ProxyServer, str]]:
    directory = TenantDirectory(store.engine)
    directory.create_tenant("acme")
    key = directory.issue_key("acme").key
    gov = Governance.for_store(store, admin_key="")
    config = ProxyConfig(
        upstreams=[UpstreamConfig(name="mock", base_url=upstream.url, timeout_s=5)], spool_dir=tmp_path / "spool"
    )
    app = create_app(config, store, governor=gov.governor, authenticator=gov.authenticator, routers=gov.routers)
    gov.install(app)
    server = ProxyServer(app).start()
    yield server, key
    server.stop()


def _stored_text(store: Store) -> str:
    return "".join(t.model_dump_json() for t in store.iter_trajectories(TrajectoryFilter()))


def test_messages_with_a_tenant_x_api_key_are_redacted(governed: tuple[ProxyServer, str], store: Store) -> None:
    proxy, key = governed
    session = httpx.post(f"{proxy.url}/v1/sessions", json={"agent": "a"}, headers={"Authorization": f"Bearer {key}"})
    sid = session.json()["id"]
    client = anthropic.Anthropic(
        base_url=proxy.url, api_key=key, max_retries=0, default_headers={"X-Evolvable-Session": sid}
    )
    question = {"role": "user", "content": f"my email is {EMAIL}"}
    first = client.messages.create(
        model="mock-tools",
        max_tokens=20,
        messages=[question],
        tools=[{"name": "lookup_order", "input_schema": {"type": "object"}}],
    )
    use = first.content[0]
    result = {"type": "tool_result", "tool_use_id": use.id, "content": f"owner {EMAIL}"}  # type: ignore[union-attr]
    second = client.messages.create(
        model="mock",
        max_tokens=20,
        messages=[question, {"role": "assistant", "content": first.content}, {"role": "user", "content": [result]}],
    )
    assert EMAIL in second.content[0].text  # type: ignore[union-attr]  # the live call is untouched
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=proxy.url, api_key="evk_wrong", max_retries=0).messages.create(
            model="mock", max_tokens=5, messages=[question]
        )
    proxy.flush()
    trajectory = store.get_trajectory(sid)
    assert trajectory.tenant_id == "acme"
    [tool] = [s for s in trajectory.steps if isinstance(s, ToolCallStep)]
    assert tool.tool_call_id == use.id and EMAIL not in str(tool.result)  # type: ignore[union-attr]
    assert EMAIL not in _stored_text(store)


def test_responses_with_a_tenant_bearer_are_redacted(governed: tuple[ProxyServer, str], store: Store) -> None:
    proxy, key = governed
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)
    response = client.responses.create(model="mock", input=f"write to {EMAIL}")
    assert EMAIL in response.output_text
    proxy.flush()
    [trajectory] = list(store.iter_trajectories(TrajectoryFilter()))
    [call] = [s for s in trajectory.steps if isinstance(s, LLMCallStep)]
    assert trajectory.tenant_id == "acme" and call.metadata["wire"]["id"] == response.id
    assert EMAIL not in _stored_text(store)
