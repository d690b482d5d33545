"""`POST /v1/messages` through the proxy to a chat-only upstream (translation), with the real `anthropic`
client: text, tool loops, streams, `x-api-key`, count_tokens, Anthropic-shaped errors, what is stored."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import httpx
import pytest
from tests.proxy.conftest import ProxyServer, new_session
from tests.proxy.mock_upstream import MockUpstream

from evolvable.protocol.models import LLMCallStep, ToolCallStep
from evolvable.store import Store, TrajectoryFilter

TOOLS: list[Any] = [
    {
        "name": "lookup_order",
        "description": "Find an order",
        "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    }
]


def _client(proxy: ProxyServer, key: str = "none") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0)


def _steps(proxy: ProxyServer, store: Store, trajectory_id: str) -> tuple[list[LLMCallStep], list[ToolCallStep]]:
    proxy.flush()
    steps = store.get_trajectory(trajectory_id).steps
    return [s for s in steps if isinstance(s, LLMCallStep)], [s for s in steps if isinstance(s, ToolCallStep)]


def test_text_reply_with_x_api_key_session(proxy: ProxyServer, store: Store, upstream: MockUpstream) -> None:
    session = new_session(proxy)
    message = _client(proxy, session["api_key"]).messages.create(
        model="mock",
        max_tokens=64,
        system=[{"type": "text", "text": "Be brief."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
        stop_sequences=["###"],
    )
    assert message.id.startswith("msg_") and message.stop_reason == "end_turn"
    [block] = message.content
    assert block.type == "text" and block.text == "echo 0: hello there"
    assert message.usage.input_tokens == 3
    sent = upstream.requests[-1]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}]
    assert sent["max_tokens"] == 64 and sent["stop"] == ["###"]
    calls, _ = _steps(proxy, store, session["id"])
    assert calls[0].choices[0].message.content == block.text
    assert calls[0].metadata["wire"] == {"protocol": "messages", "id": message.id, "native": False, "store": True}
    assert calls[0].prompt_token_ids == [101, 102, 103]


def test_tool_loop_links_tool_use_ids(proxy: ProxyServer, store: Store, upstream: MockUpstream) -> None:
    session = new_session(proxy)
    client = _client(proxy, session["api_key"])
    question = {"role": "user", "content": "where is A-1?"}
    first = client.messages.create(model="mock-tools", max_tokens=64, tools=TOOLS, messages=[question])
    assert first.stop_reason == "tool_use"
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "lookup_order" and use.input == {"order_id": "A-1"}
    result = {"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "shipped"}]}
    second = client.messages.create(
        model="mock-tools",
        max_tokens=64,
        tools=TOOLS,
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        messages=[question, {"role": "assistant", "content": first.content}, {"role": "user", "content": [result]}],
    )
    assert second.content[0].text == "echo 0: shipped"  # type: ignore[union-attr]
    sent = upstream.requests[-1]
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool"]
    assert sent["tools"][0]["function"]["parameters"] == TOOLS[0]["input_schema"]
    assert sent["tool_choice"] == "auto" and sent["parallel_tool_calls"] is False
    calls, [tool] = _steps(proxy, store, session["id"])
    assert len(calls) == 2 and tool.tool_call_id == use.id and tool.llm_step_id == calls[0].id
    assert tool.tool_name == "lookup_order" and tool.result == "shipped"


def test_stream_of_text_and_of_tool_use(proxy: ProxyServer, store: Store) -> None:
    session = new_session(proxy)
    client = _client(proxy, session["api_key"])
    with client.messages.stream(model="mock", max_tokens=64, messages=[{"role": "user", "content": "stream it"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "echo 0: stream it " and final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    with client.messages.stream(
        model="mock-tools-parallel", max_tokens=64, tools=TOOLS, messages=[{"role": "user", "content": "go"}]
    ) as s:
        kinds = [e.type for e in s]
        tooled = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [(b.name, b.input) for b in tooled.content if b.type == "tool_use"] == [
        ("lookup_order", {"order_id": "A-1"}),
        ("get_weather", {"city": "Paris"}),
    ]
    assert tooled.stop_reason == "tool_use"
    calls, _ = _steps(proxy, store, session["id"])
    assert calls[0].stream and calls[0].choices[0].message.content == text
    assert [tc.id for tc in calls[1].choices[0].message.tool_calls] == [b.id for b in tooled.content]  # type: ignore[union-attr]


def test_raw_stream_event_sequence(lite_proxy: ProxyServer) -> None:
    body = {"model": "mock", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "a b"}]}
    r = httpx.post(f"{lite_proxy.url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    names = [line[7:] for line in r.text.splitlines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[1] == "content_block_start"
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) == {"content_block_delta"}


def test_count_tokens_falls_back_to_an_exact_prompt_count(lite_proxy: ProxyServer, upstream: MockUpstream) -> None:
    counted = _client(lite_proxy).messages.count_tokens(
        model="mock", system="sys", messages=[{"role": "user", "content": "count me"}], tools=TOOLS
    )
    assert counted.input_tokens == 3  # the mock upstream's prompt_tokens
    assert upstream.requests[-1]["max_tokens"] == 1 and upstream.requests[-1]["messages"][0]["role"] == "system"
    r = httpx.post(f"{lite_proxy.url}/v1/messages/count_tokens", json={"model": "mock"})
    assert r.status_code == 400 and r.json()["type"] == "error"


def test_bad_input_gets_anthropic_errors_and_nothing_is_stored(lite_proxy: ProxyServer, sqlite_store: Store) -> None:
    url = f"{lite_proxy.url}/v1/messages"
    ok = {"model": "mock", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    cases: list[Any] = [
        b"{nope",
        [1],
        {**ok, "max_tokens": None},
        {**ok, "messages": []},
        {**ok, "messages": [{"role": "system", "content": "x"}]},
        {**ok, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}]},
        {**ok, "tools": [{"name": "f"}]},
        {**ok, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        {**ok, "tool_choice": {"type": "sometimes"}},
        {**ok, "system": [{"type": "image"}]},
    ]
    for body in cases:
        r = httpx.post(url, content=body) if isinstance(body, bytes) else httpx.post(url, json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error", body
        assert r.json()["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as caught:
        _client(lite_proxy).messages.create(model="mock", max_tokens=0, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(anthropic.AuthenticationError) as denied:
        _client(lite_proxy, "evs_wrong").messages.create(**ok)
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    lite_proxy.flush()
    assert sqlite_store.count(TrajectoryFilter()) == 0


def test_upstream_errors_are_anthropic_shaped(lite_proxy: ProxyServer) -> None:
    with pytest.raises(anthropic.InternalServerError) as caught:
        _client(lite_proxy).messages.create(
            model="error-500", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.body == {"type": "error", "error": {"type": "api_error", "message": "engine exploded"}}


def test_a_stream_answered_with_one_reply_still_streams(lite_proxy: ProxyServer) -> None:
    ask: dict[str, Any] = {"model": "ignore-stream", "max_tokens": 9, "messages": [{"role": "user", "content": "x y"}]}
    with _client(lite_proxy).messages.stream(**ask) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "echo 0: x y" and final.stop_reason == "end_turn" and final.usage.output_tokens == 5


def test_a_client_that_leaves_mid_stream_leaves_a_partial_step(lite_proxy: ProxyServer, sqlite_store: Store) -> None:
    session = new_session(lite_proxy)
    body = {
        "model": "stream-slow",
        "max_tokens": 500,
        "stream": True,
        "messages": [{"role": "user", "content": "a b c"}],
    }
    with httpx.stream(
        "POST", f"{lite_proxy.url}/v1/messages", json=body, headers={"x-api-key": session["api_key"]}
    ) as r:
        received = next(r.iter_bytes())
    assert b"message_start" in received
    deadline = time.monotonic() + 10
    calls: list[LLMCallStep] = []
    while not calls and time.monotonic() < deadline:  # the proxy notices at its next chunk
        calls, _ = _steps(lite_proxy, sqlite_store, session["id"])
        time.sleep(0.1)
    [call] = calls
    assert call.error is not None and call.error.type == "client_disconnected"
