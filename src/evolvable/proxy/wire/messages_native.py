"""Native Messages upstreams: their answers (a `message`, or its event stream) in chat form for the
recording, and a harness's rewrite of a request mapped back into the Messages protocol."""

from __future__ import annotations

from typing import Any

import orjson

from evolvable.proxy.wire.base import text_of
from evolvable.proxy.wire.messages import STOP_REASONS, tool_input
from evolvable.proxy.wire.sse import as_dict, events_of


class Normaliser:
    """Native Messages <-> chat form, for calls passed through to a Messages-speaking upstream."""

    def chat_reply(self, native_reply: dict[str, Any]) -> dict[str, Any]:
        return chat_reply_from_message(native_reply)

    def native_request(self, native: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
        return request_from_chat(native, chat)


def request_from_chat(native: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
    """The client's Messages request carrying `chat`'s system prompt, conversation and tools (the inverse of
    `parse`, for a harness's rewrite; blocks the proxy skips on the way in, e.g. thinking, are not restored)."""
    system = [text_of(m.get("content")) for m in chat["messages"] if m.get("role") == "system"]
    turns: list[dict[str, Any]] = []
    for m in chat["messages"]:
        role = m.get("role")
        if role == "system":
            continue
        if role == "assistant":
            blocks: list[dict[str, Any]] = (
                [{"type": "text", "text": text_of(m.get("content"))}] if m.get("content") else []
            )
            for tc in m.get("tool_calls") or ():
                fn = as_dict(as_dict(tc).get("function"))
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": tc.get("id"),
                        "name": fn.get("name"),
                        "input": tool_input(fn.get("arguments") or ""),
                    }
                )
            turns.append({"role": "assistant", "content": blocks})
            continue
        if role == "tool":
            blocks = [
                {"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": text_of(m.get("content"))}
            ]
        else:
            blocks = _user_blocks(m.get("content"))
        if turns and turns[-1]["role"] == "user":  # tool results and the user's text share one user turn
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": "user", "content": blocks})
    body = {**native, "messages": turns}
    body.pop("system", None)
    if system:
        body["system"] = "\n\n".join(system)
    if chat.get("tools"):
        body["tools"] = [
            {
                "name": fn.get("name"),
                "description": fn.get("description", ""),
                "input_schema": fn.get("parameters") or {"type": "object"},
            }
            for fn in (as_dict(as_dict(t).get("function")) for t in chat["tools"])
        ]
    return body


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return [{"type": "text", "text": text_of(content)}]
    blocks: list[dict[str, Any]] = []
    for part in content:
        part = as_dict(part)
        if part.get("type") == "image_url":
            url = str(as_dict(part.get("image_url")).get("url", ""))
            media, _, data = url[5:].partition(";base64,") if url.startswith("data:") else ("", "", "")
            source = {"type": "base64", "media_type": media, "data": data} if data else {"type": "url", "url": url}
            blocks.append({"type": "image", "source": source})
        else:
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
    return blocks


def chat_reply_from_message(message: dict[str, Any]) -> dict[str, Any]:
    text, has_text, calls = "", False, []
    for block in message.get("content") or ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            text, has_text = text + str(block.get("text", "")), True
        elif block.get("type") == "tool_use":
            arguments = block.get("input")
            arguments = arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": arguments},
                }
            )
    chat_message: dict[str, Any] = {"role": "assistant", "content": text if has_text else None}
    if calls:
        chat_message["tool_calls"] = calls
    reverse = {v: k for k, v in STOP_REASONS.items()}
    usage = as_dict(message.get("usage"))
    prompt, completion = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    return {
        "id": message.get("id"),
        "model": message.get("model"),
        "choices": [
            {
                "index": 0,
                "message": chat_message,
                "finish_reason": reverse.get(
                    message.get("stop_reason") or "", "stop" if message.get("stop_reason") else None
                ),
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def chat_reply_from_stream(sse_text: str) -> dict[str, Any]:
    """A recorded native Messages stream in chat form, rebuilt from its events."""
    message: dict[str, Any] = {"content": []}
    usage: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for _, event in events_of(sse_text):
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = {**event["message"], "content": []}
            usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            message["content"].append(dict(event.get("content_block") or {}))
        elif kind == "content_block_delta" and message["content"]:
            delta, index = event.get("delta") or {}, int(event.get("index", len(message["content"]) - 1))
            block = message["content"][min(index, len(message["content"]) - 1)]
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + str(delta.get("text", ""))
            elif delta.get("type") == "input_json_delta":
                partial[index] = partial.get(index, "") + str(delta.get("partial_json", ""))
        elif kind == "message_delta":
            message.update(event.get("delta") or {})
            usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
    for index, raw in partial.items():
        if index < len(message["content"]):
            message["content"][index]["input"] = raw
    message["usage"] = usage
    return chat_reply_from_message(message)
