"""Native Responses upstreams: their answers (a `response`, or its event stream) in chat form for the
recording, and a harness's rewrite of a request mapped back into the Responses protocol."""

from __future__ import annotations

from typing import Any

from evolvable.proxy.wire.base import text_of
from evolvable.proxy.wire.sse import as_dict, events_of


class Normaliser:
    """Native Responses <-> chat form, for calls passed through to a Responses-speaking upstream."""

    def chat_reply(self, native_reply: dict[str, Any]) -> dict[str, Any]:
        return chat_reply_from_response(native_reply)

    def native_request(self, native: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
        return request_from_chat(native, chat)


def request_from_chat(native: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
    """The client's Responses request carrying `chat`'s instructions, input and tools (the inverse of
    `parse`, for a harness's rewrite; reasoning items the proxy skips on the way in are not restored)."""
    system = [text_of(m.get("content")) for m in chat["messages"] if m.get("role") == "system"]
    items: list[dict[str, Any]] = []
    for m in chat["messages"]:
        role = m.get("role")
        if role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": text_of(m.get("content"))}
            )
        elif role == "assistant":
            if m.get("content"):
                items.append({"role": "assistant", "content": text_of(m.get("content"))})
            for tc in m.get("tool_calls") or ():
                fn = as_dict(as_dict(tc).get("function"))
                items.append(
                    {
                        "type": "function_call",
                        "call_id": tc.get("id"),
                        "name": fn.get("name"),
                        "arguments": fn.get("arguments") or "",
                    }
                )
        elif role != "system":
            items.append({"role": "user", "content": _input_content(m.get("content"))})
    body = {**native, "input": items}
    body.pop("instructions", None)
    if system:
        body["instructions"] = "\n\n".join(system)
    if chat.get("tools"):
        body["tools"] = [
            {"type": "function", **{k: fn[k] for k in ("name", "description", "parameters", "strict") if k in fn}}
            for fn in (as_dict(as_dict(t).get("function")) for t in chat["tools"])
        ]
    return body


def _input_content(content: Any) -> Any:
    if not isinstance(content, list):
        return text_of(content)
    parts = []
    for part in content:
        part = as_dict(part)
        if part.get("type") == "image_url":
            parts.append(
                {"type": "input_image", "image_url": as_dict(part.get("image_url")).get("url"), "detail": "auto"}
            )
        else:
            parts.append({"type": "input_text", "text": str(part.get("text", ""))})
    return parts


def chat_reply_from_response(response: dict[str, Any]) -> dict[str, Any]:
    text, has_text, calls = "", False, []
    for item in response.get("output") or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "output_text":
                    text, has_text = text + str(part.get("text", "")), True
        elif item.get("type") == "function_call":
            calls.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": text if has_text else None}
    if calls:
        message["tool_calls"] = calls
    usage = as_dict(response.get("usage"))
    finish = "tool_calls" if calls else "length" if response.get("status") == "incomplete" else "stop"
    return {
        "id": response.get("id"),
        "model": response.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage.get("input_tokens", 0),
            "completion_tokens": usage.get("output_tokens", 0),
            "total_tokens": usage.get("total_tokens", 0),
        },
    }


def chat_reply_from_stream(sse_text: str) -> dict[str, Any]:
    """A recorded native Responses stream in chat form: its final `response` object, else the deltas so far."""
    text, calls, final = "", {}, None
    for _, event in events_of(sse_text):
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            final = event.get("response")
        elif kind == "response.output_text.delta":
            text += str(event.get("delta", ""))
        elif kind == "response.output_item.added" and (event.get("item") or {}).get("type") == "function_call":
            calls[event["item"].get("id")] = dict(event["item"])
        elif kind == "response.function_call_arguments.delta" and event.get("item_id") in calls:
            calls[event["item_id"]]["arguments"] = calls[event["item_id"]].get("arguments", "") + str(
                event.get("delta", "")
            )
    if isinstance(final, dict):
        return chat_reply_from_response(final)
    partial = {"output": [{"type": "message", "content": [{"type": "output_text", "text": text}]}, *calls.values()]}
    reply = chat_reply_from_response(partial)
    reply["choices"][0]["finish_reason"] = None
    return reply
