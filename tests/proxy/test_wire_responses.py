"""`POST /v1/responses` through the proxy to a chat-only upstream (translation), with the real `openai`
client: text, tool loops (full history and `previous_response_id`), streams, errors, and what is stored."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from tests.proxy.conftest import ProxyServer, new_session
from tests.proxy.mock_upstream import MockUpstream

from evolvable.protocol.models import LLMCallStep, ToolCallStep
from evolvable.store import Store, TrajectoryFilter

TOOLS = [
    {
        "type": "function",
        "name": "lookup_order",
        "description": "Find an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    }
]


def _client(proxy: ProxyServer, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)


def _steps(proxy: ProxyServer, store: Store, trajectory_id: str) -> tuple[list[LLMCallStep], list[ToolCallStep]]:
    proxy.flush()
    steps = store.get_trajectory(trajectory_id).steps
    return [s for s in steps if isinstance(s, LLMCallStep)], [s for s in steps if isinstance(s, ToolCallStep)]


def test_text_reply_is_a_response_and_an_llm_call(proxy: ProxyServer, store: Store, upstream: MockUpstream) -> None:
    session = new_session(proxy)
    client = _client(proxy, session["api_key"])
    response = client.responses.create(model="mock", instructions="Be brief.", input="hello there")
    assert response.id.startswith("resp_") and response.status == "completed"
    assert response.output_text == "echo 0: hello there"
    assert response.usage is not None and response.usage.input_tokens == 3
    assert upstream.requests[-1]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]
    calls, tools = _steps(proxy, store, session["id"])
    assert len(calls) == 1 and tools == []
    call = calls[0]
    assert [m.role for m in call.request_messages] == ["system", "user"]
    assert call.choices[0].message.content == response.output_text  # the exact text the client received
    assert call.metadata["wire"] == {"protocol": "responses", "id": response.id, "native": False, "store": True}
    assert call.prompt_token_ids == [101, 102, 103] and call.choices[0].completion_token_ids  # captured as for chat


def test_tool_loop_with_full_history(proxy: ProxyServer, store: Store) -> None:
    session = new_session(proxy)
    client = _client(proxy, session["api_key"])
    first = client.responses.create(model="mock-tools", input="where is A-1?", tools=TOOLS)
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "lookup_order" and call.arguments == '{"order_id": "A-1"}'
    history: list[Any] = [
        {"role": "user", "content": "where is A-1?"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "shipped"},
    ]
    second = client.responses.create(model="mock-tools", input=history, tools=TOOLS)
    assert second.output_text == "echo 0: shipped"
    calls, tools = _steps(proxy, store, session["id"])
    assert len(calls) == 2
    [tool] = tools
    assert tool.tool_call_id == call.call_id and tool.llm_step_id == calls[0].id
    assert tool.tool_name == "lookup_order" and tool.result == "shipped"
    assert calls[0].choices[0].message.tool_calls[0].id == call.call_id
    assert calls[1].choices[0].message.content == second.output_text


def test_previous_response_id_continues_the_conversation(
    proxy: ProxyServer, store: Store, upstream: MockUpstream
) -> None:
    session = new_session(proxy)
    client = _client(proxy, session["api_key"])
    first = client.responses.create(model="mock-tools", instructions="Help.", input="where is A-1?", tools=TOOLS)
    call_id = first.output[0].call_id  # type: ignore[union-attr]
    second = client.responses.create(
        model="mock-tools",
        instructions="Help again.",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call_id, "output": "shipped"}],
        tools=TOOLS,
    )
    assert second.output_text == "echo 0: shipped" and second.previous_response_id == first.id
    sent = upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[0]["content"] == "Help again."  # instructions do not carry over
    assert sent[2]["tool_calls"][0]["id"] == call_id
    third = client.responses.create(model="mock", previous_response_id=second.id, input="thanks")
    assert [m["role"] for m in upstream.requests[-1]["messages"]] == ["user", "assistant", "tool", "assistant", "user"]
    assert third.output_text == "echo 0: thanks"
    calls, [tool] = _steps(proxy, store, session["id"])
    assert len(calls) == 3 and tool.llm_step_id == calls[0].id and tool.tool_call_id == call_id


def test_previous_response_id_is_read_back_from_the_store(proxy: ProxyServer, upstream: MockUpstream) -> None:
    session = new_session(proxy)
    client = _client(proxy, session["api_key"])
    first = client.responses.create(model="mock", input="remember me")
    proxy.app.wire.history._recent.clear()  # as after a restart: only the store knows it
    client.responses.create(model="mock", previous_response_id=first.id, input="again")
    sent = upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == first.output_text


def test_unknown_or_foreign_previous_response_is_404_and_nothing_is_stored(
    lite_proxy: ProxyServer, sqlite_store: Store
) -> None:
    session, other = new_session(lite_proxy), new_session(lite_proxy)
    client = _client(lite_proxy, session["api_key"])
    mine = client.responses.create(model="mock", input="hi")
    private = client.responses.create(model="mock", input="hi", store=False)
    lite_proxy.flush()
    before = len(sqlite_store.get_trajectory(session["id"]).steps)
    for key, ref in (
        (session["api_key"], "resp_unknown"),
        (other["api_key"], mine.id),
        (session["api_key"], private.id),
    ):
        with pytest.raises(openai.NotFoundError) as caught:
            _client(lite_proxy, key).responses.create(model="mock", previous_response_id=ref, input="again")
        assert caught.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
        assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    lite_proxy.flush()
    assert len(sqlite_store.get_trajectory(session["id"]).steps) == before
    assert sqlite_store.get_trajectory(other["id"]).steps == []


def test_stream_events_and_the_stored_text(proxy: ProxyServer, store: Store) -> None:
    session = new_session(proxy)
    client = _client(proxy, session["api_key"])
    events = list(client.responses.create(model="mock", input="stream this please", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for expected in ("response.output_item.added", "response.content_part.added", "response.output_text.done"):
        assert expected in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert text == final.output_text == "echo 0: stream this please "
    assert final.usage is not None and final.usage.output_tokens > 0
    calls, _ = _steps(proxy, store, session["id"])
    assert calls[0].stream and calls[0].choices[0].message.content == text
    assert calls[0].metadata["wire"]["id"] == final.id


def test_streamed_tool_call_events_and_the_helper(lite_proxy: ProxyServer, sqlite_store: Store) -> None:
    session = new_session(lite_proxy)
    client = _client(lite_proxy, session["api_key"])
    with client.responses.stream(model="mock-tools-parallel", input="two things", tools=TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    args = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(args) == '{"order_id": "A-1"}{"city": "Paris"}'
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [
        ("lookup_order", '{"order_id": "A-1"}'),
        ("get_weather", '{"city": "Paris"}'),
    ]
    stored, _ = _steps(lite_proxy, sqlite_store, session["id"])
    assert [tc.id for tc in stored[0].choices[0].message.tool_calls] == [c.call_id for c in calls]


def test_malformed_requests_get_openai_errors_and_nothing_is_stored(
    lite_proxy: ProxyServer, sqlite_store: Store
) -> None:
    url = f"{lite_proxy.url}/v1/responses"
    cases: list[tuple[Any, int, str]] = [
        (b"{nope", 400, "invalid_json"),
        ([1], 400, "invalid_json"),
        ({"model": "mock"}, 400, "invalid_request_error"),
        ({"input": "hi"}, 400, "invalid_request_error"),
        ({"model": "mock", "input": [{"type": "web_search_call"}]}, 400, "unsupported_input_item"),
        ({"model": "mock", "input": "hi", "tools": [{"type": "web_search"}]}, 400, "unsupported_tool"),
        ({"model": "mock", "input": [{"role": "robot", "content": "x"}]}, 400, "invalid_request_error"),
        ({"model": "mock", "input": [{"type": "function_call", "name": "f"}]}, 400, "invalid_request_error"),
        ({"model": "mock", "input": "hi", "max_output_tokens": 0}, 400, "invalid_request_error"),
    ]
    for body, status, code in cases:
        r = httpx.post(url, content=body) if isinstance(body, bytes) else httpx.post(url, json=body)
        assert r.status_code == status, (body, r.text)
        error = r.json()["error"]
        assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"], body
    assert httpx.get(url).status_code == 405
    r = httpx.post(url, json={"model": "mock", "input": "hi"}, headers={"Authorization": "Bearer evs_wrong"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    lite_proxy.flush()
    assert sqlite_store.count(TrajectoryFilter()) == 0


def test_upstream_errors_reach_the_client_in_the_openai_shape(lite_proxy: ProxyServer) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        _client(lite_proxy).responses.create(model="error-500", input="hi")
    assert caught.value.body["message"] == "engine exploded"  # type: ignore[index]


def test_a_stream_answered_with_one_reply_still_streams(lite_proxy: ProxyServer) -> None:
    events = list(_client(lite_proxy).responses.create(model="ignore-stream", input="x y", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "echo 0: x y"
