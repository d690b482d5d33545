"""Per-upstream protocols: an upstream that speaks Responses / Messages gets the client's request unchanged
and the client gets the upstream's answer unchanged; the recording is still a chat-form llm_call. A harness
that rewrote the request sends it translated (through chat) so that it applies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from tests.proxy.conftest import ProxyServer, new_session
from tests.proxy.mock_upstream import MockUpstream

from evolvable.protocol.models import LLMCallStep
from evolvable.proxy.app import create_app
from evolvable.proxy.config import ProxyConfig, UpstreamConfig, config_from_dict
from evolvable.proxy.hooks import RewriteResult, SessionContext
from evolvable.proxy.wire.base import WireCall
from evolvable.store import Store, TrajectoryFilter


class SystemPromptHarness:
    def prepare(self, ctx: SessionContext, body: dict[str, Any]) -> RewriteResult:
        return RewriteResult(body={**body, "messages": [{"role": "system", "content": "harness"}, *body["messages"]]})


def _start(upstream: MockUpstream, store: Store, spool: Path, protocols: tuple[str, ...], **kw: Any) -> ProxyServer:
    cfg = ProxyConfig(
        upstreams=[UpstreamConfig(name="mock", base_url=upstream.url, timeout_s=5.0, protocols=protocols)],
        spool_dir=spool,
    )
    return ProxyServer(create_app(cfg, store, **kw)).start()


@pytest.fixture
def native(upstream: MockUpstream, sqlite_store: Store, tmp_path: Path) -> Iterator[ProxyServer]:
    server = _start(upstream, sqlite_store, tmp_path / "spool", ("chat", "responses", "messages"))
    yield server
    server.stop()


def _calls(proxy: ProxyServer, store: Store, trajectory_id: str) -> list[LLMCallStep]:
    proxy.flush()
    return [s for s in store.get_trajectory(trajectory_id).steps if isinstance(s, LLMCallStep)]


def test_responses_pass_through_unchanged(native: ProxyServer, sqlite_store: Store, upstream: MockUpstream) -> None:
    session = new_session(native)
    client = openai.OpenAI(base_url=f"{native.url}/v1", api_key=session["api_key"], max_retries=0)
    response = client.responses.create(model="mock", input="hi", instructions="x", metadata={"k": "v"})
    assert response.id == f"resp_native_{len(upstream.requests)}" and response.output_text == "native: hi"
    assert upstream.requests[-1] == {"model": "mock", "input": "hi", "instructions": "x", "metadata": {"k": "v"}}
    events = list(client.responses.create(model="mock", input="stream me", stream=True))
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert streamed == "native: stream me" and events[-1].type == "response.completed"
    first, second = _calls(native, sqlite_store, session["id"])
    assert first.choices[0].message.content == "native: hi" and first.metadata["wire"]["native"] is True
    assert [m.role for m in first.request_messages] == ["system", "user"]
    assert second.stream and second.choices[0].message.content == streamed
    assert second.usage is not None and second.usage.prompt_tokens == 4


def test_messages_pass_through_with_anthropic_headers(
    native: ProxyServer, sqlite_store: Store, upstream: MockUpstream
) -> None:
    session = new_session(native)
    client = anthropic.Anthropic(
        base_url=native.url,
        api_key=session["api_key"],
        max_retries=0,
        default_headers={"anthropic-version": "2023-06-01"},
    )
    ask = {"model": "mock", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
    message = client.messages.create(**ask)  # type: ignore[arg-type]
    assert message.id.startswith("msg_native_") and message.content[0].text == "native: hi"  # type: ignore[union-attr]
    assert upstream.requests[-1] == ask
    assert upstream.native_headers[-1]["anthropic-version"] == "2023-06-01"  # the client's, forwarded
    assert "x-api-key" not in upstream.native_headers[-1]  # a session key is the proxy's, never forwarded
    with client.messages.stream(**ask) as s:  # type: ignore[arg-type]
        text = "".join(s.text_stream)
    assert text == "native: hi"
    assert client.messages.count_tokens(model="mock", messages=ask["messages"]).input_tokens == 42  # type: ignore[arg-type]
    first, second = _calls(native, sqlite_store, session["id"])
    assert first.choices[0].message.content == "native: hi" and second.choices[0].message.content == text
    assert second.choices[0].finish_reason == "stop" and second.metadata["wire"]["native"] is True


def test_a_harness_change_is_translated_so_it_applies(
    upstream: MockUpstream, sqlite_store: Store, tmp_path: Path
) -> None:
    server = _start(upstream, sqlite_store, tmp_path / "s", ("chat", "responses"), rewriter=SystemPromptHarness())
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        response = client.responses.create(model="mock", input="hi")
        assert response.id.startswith("resp_") and "native" not in response.id
        assert upstream.requests[-1]["messages"][0] == {"role": "system", "content": "harness"}
    finally:
        server.stop()


def test_a_native_only_upstream_gets_the_harness_in_its_own_protocol(
    upstream: MockUpstream, sqlite_store: Store, tmp_path: Path
) -> None:
    server = _start(upstream, sqlite_store, tmp_path / "s", ("responses", "messages"), rewriter=SystemPromptHarness())
    try:
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0).responses.create(
            model="mock", instructions="mine", input="hi", metadata={"k": "v"}
        )
        sent = upstream.requests[-1]
        assert sent["instructions"] == "harness\n\nmine" and sent["metadata"] == {"k": "v"}
        assert sent["input"] == [{"role": "user", "content": "hi"}]
        anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0).messages.create(
            model="mock", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
        assert upstream.requests[-1]["system"] == "harness" and upstream.requests[-1]["max_tokens"] == 5
        server.flush()
        calls = [s for t in sqlite_store.iter_trajectories(TrajectoryFilter()) for s in t.steps]
        assert {c.metadata["wire"]["native"] for c in calls} == {True}
        assert all(c.request_messages[0].content == "harness" for c in calls)  # type: ignore[union-attr]
    finally:
        server.stop()


def test_protocols_are_validated_in_the_config() -> None:
    cfg = config_from_dict({"upstreams": [{"name": "a", "base_url": "http://x", "protocols": ["chat", "messages"]}]})
    assert cfg.validate().upstreams[0].protocols == ("chat", "messages")
    assert config_from_dict({"upstreams": [{"name": "a", "base_url": "http://x"}]}).upstreams[0].protocols == ("chat",)
    with pytest.raises(Exception, match="protocols"):
        config_from_dict({"upstreams": [{"name": "a", "base_url": "http://x", "protocols": ["grpc"]}]}).validate()


def test_native_for_needs_the_protocol_and_an_untouched_request() -> None:
    from evolvable.proxy.wire import responses, responses_native

    request = responses.parse({"model": "m", "input": "hi"})
    call = WireCall("responses", "/v1/responses", request, responses_native.Normaliser())
    chat_only = UpstreamConfig(name="a", base_url="http://x")
    both = UpstreamConfig(name="b", base_url="http://x", protocols=("chat", "responses"))
    only = UpstreamConfig(name="c", base_url="http://x", protocols=("responses",))
    assert not call.native_for(chat_only, request.chat)
    assert call.native_for(both, {**request.chat, "model": "served"})
    changed = {**request.chat, "messages": [{"role": "system", "content": "h"}, *request.chat["messages"]]}
    assert not call.native_for(both, changed) and call.native_for(only, changed)
