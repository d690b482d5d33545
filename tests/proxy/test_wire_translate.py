"""The wire adapters as pure functions: request translation, and answers checked against the `openai` and
`anthropic` packages' own typed models (replies and every stream event)."""

from __future__ import annotations

import json
from typing import Any

import anthropic.types as at
import openai.types.responses as rt
import pytest
from pydantic import TypeAdapter

from evolvable.proxy.wire import messages, messages_native, responses, responses_native
from evolvable.proxy.wire.base import WireError
from evolvable.proxy.wire.sse import SSEDecoder, events_of

RESPONSE_EVENT: TypeAdapter[Any] = TypeAdapter(rt.ResponseStreamEvent)
MESSAGE_EVENT: TypeAdapter[Any] = TypeAdapter(at.RawMessageStreamEvent)


def _chat_stream(text_pieces: list[str], calls: list[tuple[str, str, list[str]]], finish: str) -> bytes:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        body = {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in text_pieces]
    for k, (call_id, name, pieces) in enumerate(calls):
        out.append(chunk({"tool_calls": [{"index": k, "id": call_id, "function": {"name": name, "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": k, "function": {"arguments": p}}]}) for p in pieces]
    out.append(chunk({}, finish))
    usage = {"id": "c1", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}}
    out.append(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
    return b"".join(out)


STREAM = _chat_stream(["Hel", "lo"], [("call_1", "f", ['{"a"', ": 1}"]), ("call_2", "g", ["{}"])], "tool_calls")
CHAT_REPLY = {
    "id": "c1",
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Hello",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11},
}


def _byte_by_byte(translator: Any, data: bytes) -> list[dict[str, Any]]:
    out = (
        translator.start() + b"".join(translator.feed(data[i : i + 1]) for i in range(len(data))) + translator.finish()
    )
    return [event for _, event in events_of(out.decode())]


def test_responses_request_translation() -> None:
    request = responses.parse(
        {
            "model": "m",
            "instructions": "sys",
            "input": [
                {"role": "developer", "content": "dev"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
                {"type": "reasoning", "id": "r", "summary": []},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "thinking"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "r1"}]},
                {"type": "function_call_output", "call_id": "c2", "output": "r2"},
            ],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
            "tool_choice": {"type": "function", "name": "f"},
            "max_output_tokens": 5,
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
            "stream": True,
        }
    )
    chat = request.chat
    assert [m["role"] for m in chat["messages"]] == ["system", "system", "user", "assistant", "tool", "tool"]
    assert chat["messages"][3]["content"] == "thinking" and [c["id"] for c in chat["messages"][3]["tool_calls"]] == [
        "c1",
        "c2",
    ]
    assert chat["messages"][4] == {"role": "tool", "tool_call_id": "c1", "content": "r1"}
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["max_tokens"] == 5 and chat["stream_options"] == {"include_usage": True}
    assert chat["response_format"]["json_schema"]["name"] == "s"


def test_responses_answers_match_the_openai_types() -> None:
    request = responses.parse({"model": "m", "input": "q", "tools": [{"type": "function", "name": "f"}]})
    reply, _ = responses.reply(CHAT_REPLY, "resp_x", request)
    parsed = rt.Response.model_validate(reply)
    assert parsed.output_text == "Hello" and [o.type for o in parsed.output] == ["message", "function_call"]
    events = _byte_by_byte(responses.StreamTranslator("resp_y", request), STREAM)
    typed = [RESPONSE_EVENT.validate_python(e) for e in events]
    assert [e.sequence_number for e in typed] == list(range(len(typed)))
    final = typed[-1].response
    assert typed[-1].type == "response.completed" and final.usage.input_tokens == 7
    assert [(o.type, getattr(o, "arguments", None)) for o in final.output] == [
        ("message", None),
        ("function_call", '{"a": 1}'),
        ("function_call", "{}"),
    ]
    assert final.output[0].content[0].text == "Hello"


def test_messages_request_translation() -> None:
    request = messages.parse(
        {
            "model": "m",
            "max_tokens": 9,
            "system": "sys",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
                        {"type": "text", "text": "look"},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "text", "text": "ok"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "bad", "is_error": True},
                        {"type": "text", "text": "and?"},
                    ],
                },
            ],
            "tool_choice": {"type": "any"},
            "metadata": {"user_id": "u1"},
        }
    )
    chat = request.chat
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert chat["messages"][1]["content"][0] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,AA=="},
    }
    assert chat["messages"][2]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a":1}'}
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "Error: bad"}
    assert chat["tool_choice"] == "required" and chat["user"] == "u1"


def test_messages_answers_match_the_anthropic_types() -> None:
    request = messages.parse({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "q"}]})
    reply, _ = messages.reply(CHAT_REPLY, "msg_x", request)
    parsed = at.Message.model_validate(reply)
    assert parsed.stop_reason == "tool_use" and parsed.content[1].input == {"a": 1}  # type: ignore[union-attr]
    events = [
        MESSAGE_EVENT.validate_python(e) for e in _byte_by_byte(messages.StreamTranslator("msg_y", request), STREAM)
    ]
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    assert events[-2].delta.stop_reason == "tool_use" and events[-2].usage.output_tokens == 4


def test_a_mid_stream_error_becomes_the_protocols_error_event() -> None:
    broken = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: {"error":{"message":"gone"}}\n\n'
    request = messages.parse({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "q"}]})
    kinds = [e["type"] for e in _byte_by_byte(messages.StreamTranslator("msg_z", request), broken)]
    assert "error" in kinds and "message_stop" not in kinds
    request = responses.parse({"model": "m", "input": "q"})
    kinds = [e["type"] for e in _byte_by_byte(responses.StreamTranslator("resp_z", request), broken)]
    assert "error" in kinds and kinds[-1] == "response.failed"


def test_sse_decoder_keeps_partial_events_and_crlf() -> None:
    decoder = SSEDecoder()
    assert list(decoder.feed(b'event: x\r\ndata: {"a": 1}\r')) == []
    assert list(decoder.feed(b'\n\r\ndata: [DONE]\n\ndata: {"b"')) == [("x", {"a": 1})]
    assert list(decoder.feed(b": 2}")) == [] and list(decoder.flush()) == [(None, {"b": 2})]


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "input": "q", "previous_response_id": 5},
        {"model": "m", "input": "q", "store": "no"},
        {"model": "m", "input": [{"type": "item_reference", "id": "x"}]},
        {"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
        {"model": "m", "input": "q", "tool_choice": "sometimes"},
    ],
)
def test_responses_rejections_name_the_parameter(body: dict[str, Any]) -> None:
    with pytest.raises(WireError) as caught:
        responses.parse(body)
    assert caught.value.status == 400 and caught.value.param and caught.value.message


def test_error_bodies() -> None:
    assert json.loads(messages.render_error(404, "no")) == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "no"},
    }
    assert json.loads(messages.rewrap_error(503, b'{"error": {"message": "busy"}}'))["error"] == {
        "type": "api_error",
        "message": "busy",
    }
    assert json.loads(messages.rewrap_error(502, b"plain text"))["error"]["message"] == "plain text"
    assert (
        json.loads(responses.render_error(404, "gone", "previous_response_not_found", "previous_response_id"))["error"][
            "param"
        ]
        == "previous_response_id"
    )


def test_a_rewritten_chat_request_maps_back_to_each_protocol() -> None:
    """The inverse translation (a harness's rewrite for a native-only upstream) reads back to the same chat."""
    native_messages = {
        "model": "m",
        "max_tokens": 9,
        "system": "sys",
        "metadata": {"user_id": "u"},
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "r"},
                    {"type": "text", "text": "and?"},
                ],
            },
        ],
        "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
    }
    chat = messages.parse(native_messages).chat
    back = messages_native.request_from_chat(native_messages, chat)
    assert back["metadata"] == {"user_id": "u"} and messages.parse(back).chat == chat
    native_responses = {
        "model": "m",
        "instructions": "sys",
        "input": [
            {"role": "user", "content": "q"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "r"},
        ],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    }
    chat = responses.parse(native_responses).chat
    assert responses.parse(responses_native.request_from_chat(native_responses, chat)).chat == chat


def test_a_claude_code_shaped_request_translates() -> None:
    """cache_control everywhere, a system block list, thinking, and a tool result holding an image."""
    cached = {"type": "ephemeral"}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    chat = messages.parse(
        {
            "model": "m",
            "max_tokens": 32000,
            "stream": True,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "metadata": {"user_id": "user_abc"},
            "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": cached}],
            "tools": [
                {
                    "name": "Read",
                    "description": "Read a file",
                    "input_schema": {"type": "object"},
                    "cache_control": cached,
                }
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "look at a.png", "cache_control": cached}]},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.png"}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "an image:"}, image],
                        }
                    ],
                },
            ],
        }
    ).chat
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "an image:"}
    assert chat["messages"][4]["content"] == [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]
    assert chat["user"] == "user_abc" and chat["max_tokens"] == 32000
