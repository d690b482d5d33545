"""The Anthropic Messages API (`POST /v1/messages`) as an adapter onto chat completions.

Request: `system`, `messages` with text / image / `tool_use` / `tool_result` blocks, `tools` with
`input_schema`, `tool_choice`, `max_tokens`, `stop_sequences` -> a chat body. Answer: a chat reply or
chunk stream -> a `message` or the Messages event stream. `tool_use.id` is the chat tool-call id, so a
`tool_result.tool_use_id` links to the call the proxy recorded.
"""

from __future__ import annotations

from typing import Any

import orjson

from evolvable.proxy.wire.base import WireCall, WireError, WireRequest, require, require_dict, require_list
from evolvable.proxy.wire.sse import AssistantTurn, ChatDeltas, SSEDecoder, as_dict, frame

PROTOCOL = "messages"
NATIVE_PATH = "/v1/messages"
COUNT_PATH = "/v1/messages/count_tokens"
ID_PREFIX = "msg_"
DEFAULT_VERSION = "2023-06-01"

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_IGNORED_BLOCKS = {"thinking", "redacted_thinking"}


def render_error(status: int, message: str, code: str = "invalid_request_error", param: str | None = None) -> bytes:
    """Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`."""
    error_type = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"type": "error", "error": {"type": error_type, "message": message}})


def rewrap_error(status: int, raw: bytes) -> bytes:
    """An OpenAI-shaped error (the hot path's, a chat upstream's) in Anthropic's shape; native ones pass."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return render_error(status, raw[:2000].decode("utf-8", "replace"))
    if isinstance(parsed, dict) and parsed.get("type") == "error":
        return raw
    error = parsed.get("error") if isinstance(parsed, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return render_error(status, str(message or parsed))


# --------------------------------------------------------------------------- request


def parse(body: dict[str, Any], *, counting: bool = False) -> WireRequest:
    """Validate a Messages (or count_tokens) request and build the chat body."""
    model = body.get("model")
    require(isinstance(model, str) and bool(model), "model: Field required", "model")
    max_tokens = body.get("max_tokens")
    if not counting:
        require(
            isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens >= 1,
            "max_tokens: Field required (an integer >= 1)",
            "max_tokens",
        )
    raw_messages = require_list(body.get("messages"), "messages: a non-empty list is required", "messages")
    require(bool(raw_messages), "messages: a non-empty list is required", "messages")
    messages = _system(body.get("system"))
    for i, message in enumerate(raw_messages):
        messages.extend(_message(message, f"messages.{i}"))
    chat: dict[str, Any] = {"model": model, "messages": messages}
    if not counting:
        chat["max_tokens"] = max_tokens
    tools = body.get("tools")
    if tools:
        require(isinstance(tools, list), "tools: must be a list", "tools")
        chat["tools"] = [_tool(t, f"tools.{i}") for i, t in enumerate(tools)]
    if body.get("tool_choice") is not None:
        chat.update(_tool_choice(body["tool_choice"]))
    for field in ("temperature", "top_p", "top_k"):
        value = body.get(field)
        if value is not None:
            require(isinstance(value, int | float) and not isinstance(value, bool), f"{field}: must be a number", field)
            chat[field] = value
    stops = body.get("stop_sequences")
    if stops:
        require(
            isinstance(stops, list) and all(isinstance(s, str) and s for s in stops),
            "stop_sequences: must be a list of non-empty strings",
            "stop_sequences",
        )
        chat["stop"] = stops
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    stream = body.get("stream", False)
    require(isinstance(stream, bool), "stream: must be a boolean", "stream")
    if stream and not counting:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return WireRequest(native=body, chat=chat, stream=stream and not counting)


def _system(system: Any) -> list[dict[str, Any]]:
    if system is None or system == "":
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    require(isinstance(system, list), "system: must be a string or a list of text blocks", "system")
    texts = []
    for i, block in enumerate(system):
        require(
            isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str),
            f"system.{i}: must be a text block",
            f"system.{i}",
        )
        texts.append(block["text"])
    return [{"role": "system", "content": "\n\n".join(texts)}]


def _message(message: Any, where: str) -> list[dict[str, Any]]:
    """One Messages turn -> chat messages: tool results become `role: tool` messages (before the text)."""
    require(isinstance(message, dict), f"{where}: must be an object", where)
    role = message.get("role")
    require(role in ("user", "assistant"), f"{where}.role: must be user or assistant", f"{where}.role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    require(isinstance(content, list), f"{where}.content: must be a string or a list of blocks", f"{where}.content")
    tool_results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        at = f"{where}.content.{j}"
        require(isinstance(block, dict), f"{at}: must be an object", at)
        kind = block.get("type")
        if kind == "text":
            require(isinstance(block.get("text"), str), f"{at}.text: must be a string", f"{at}.text")
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and role == "user":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block, at)}})
        elif kind == "tool_use" and role == "assistant":
            for key in ("id", "name"):
                require(isinstance(block.get(key), str), f"{at}.{key}: must be a string", f"{at}.{key}")
            require(isinstance(block.get("input", {}), dict), f"{at}.input: must be an object", f"{at}.input")
            arguments = orjson.dumps(block.get("input", {})).decode()
            calls.append(
                {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}}
            )
        elif kind == "tool_result" and role == "user":
            require(
                isinstance(block.get("tool_use_id"), str), f"{at}.tool_use_id: must be a string", f"{at}.tool_use_id"
            )
            tool_results.append(
                {"role": "tool", "tool_call_id": block["tool_use_id"], "content": _result_text(block, at, parts)}
            )
        elif kind in _IGNORED_BLOCKS:
            continue
        else:
            raise WireError(
                400,
                f"{at}: block type {kind!r} is not supported in a {role} message by this proxy",
                "invalid_request_error",
                f"{at}.type",
            )
    out = list(tool_results)
    if role == "assistant":
        text = "".join(p["text"] for p in parts)
        msg: dict[str, Any] = {"role": "assistant", "content": text if parts else None}
        if calls:
            msg["tool_calls"] = calls
        if parts or calls:
            out.append(msg)
    elif parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "".join(p["text"] for p in parts) if only_text else parts})
    return out


def _image_url(block: dict[str, Any], at: str) -> str:
    source = require_dict(block.get("source"), f"{at}.source: required", f"{at}.source")
    if source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    url = source.get("url")
    if source.get("type") == "url" and isinstance(url, str):
        return url
    raise WireError(
        400, f"{at}.source: type {source.get('type')!r} is not supported", "invalid_request_error", f"{at}.source"
    )


def _result_text(block: dict[str, Any], at: str, user_parts: list[dict[str, Any]]) -> str:
    """A tool result's text. Chat tool messages hold text only, so its images go to the user turn that
    follows the tool messages (appended to `user_parts`), as the model would see them."""
    content = block.get("content", "")
    if isinstance(content, str):
        text = content
    else:
        content = require_list(content, f"{at}.content: must be a string or a list of blocks", f"{at}.content")
        texts = []
        for k, item in enumerate(content):
            item = as_dict(item)
            if item.get("type") == "text" and isinstance(item.get("text"), str):
                texts.append(item["text"])
            elif item.get("type") == "image":
                user_parts.append({"type": "image_url", "image_url": {"url": _image_url(item, f"{at}.content.{k}")}})
            else:
                raise WireError(
                    400,
                    f"{at}.content.{k}: only text and image blocks are supported in tool results",
                    "invalid_request_error",
                    f"{at}.content.{k}",
                )
        text = "".join(texts)
    return f"Error: {text}" if block.get("is_error") else text


def _tool(tool: Any, where: str) -> dict[str, Any]:
    require(isinstance(tool, dict), f"{where}: must be an object", where)
    if tool.get("type") not in (None, "custom"):
        raise WireError(
            400,
            f"{where}: server tool {tool.get('type')!r} is not supported (only custom tools)",
            "invalid_request_error",
            f"{where}.type",
        )
    require(isinstance(tool.get("name"), str) and bool(tool["name"]), f"{where}.name: Field required", f"{where}.name")
    require(
        isinstance(tool.get("input_schema"), dict), f"{where}.input_schema: Field required", f"{where}.input_schema"
    )
    function: dict[str, Any] = {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> dict[str, Any]:
    require(isinstance(choice, dict), "tool_choice: must be an object", "tool_choice")
    kind = choice.get("type")
    out: dict[str, Any] = {}
    if kind in ("auto", "none"):
        out["tool_choice"] = kind
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise WireError(
            400, "tool_choice: type must be auto, any, tool (with name) or none", "invalid_request_error", "tool_choice"
        )
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


# --------------------------------------------------------------------------- answer


def tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return {"_unparsed_arguments": arguments}  # the model wrote invalid JSON; keep it rather than drop it
    return value if isinstance(value, dict) else {"_value": value}


def _usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    usage = usage or {}
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
    }


def message_object(message_id: str, request: WireRequest, turn: AssistantTurn) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.has_text and (turn.text or not turn.tool_calls):
        content.append({"type": "text", "text": turn.text})
    for call in turn.tool_calls:
        content.append(
            {"type": "tool_use", "id": call["id"], "name": call["name"], "input": tool_input(call["arguments"])}
        )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": turn.model or request.native.get("model"),
        "content": content,
        "stop_reason": STOP_REASONS.get(turn.finish_reason or "stop", "end_turn"),
        "stop_sequence": None,
        "usage": _usage(turn.usage),
    }


def reply(chat_reply: dict[str, Any], message_id: str, request: WireRequest) -> tuple[dict[str, Any], AssistantTurn]:
    turn = AssistantTurn.from_chat_reply(chat_reply)
    return message_object(message_id, request, turn), turn


class StreamTranslator:
    """Chat chunks in, Messages events out: `message_start`, one content block at a time
    (`content_block_start/delta/stop`), `message_delta` with the stop reason and usage, `message_stop`."""

    def __init__(self, message_id: str, request: WireRequest) -> None:
        self.message_id, self.request = message_id, request
        self.decoder = SSEDecoder()
        self.deltas = ChatDeltas()
        self.blocks = 0
        self.open: str | None = None

    @property
    def turn(self) -> AssistantTurn:
        return self.deltas.turn

    def start(self) -> bytes:
        shell: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.request.native.get("model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return frame({"type": "message_start", "message": shell}, "message_start")

    def feed(self, chunk: bytes) -> bytes:
        return b"".join(self._apply(op) for _, data in self.decoder.feed(chunk) for op in self.deltas.read(data))

    def _apply(self, op: tuple[Any, ...]) -> bytes:
        kind = op[0]
        if kind == "text":
            out = b""
            if self.open != "text":
                out = self._close() + self._start_block({"type": "text", "text": ""}, "text")
            delta = {"type": "text_delta", "text": op[1]}
            return out + frame(
                {"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}, "content_block_delta"
            )
        if kind == "tool":
            call = self.turn.tool_calls[op[1]]
            block = {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}
            return self._close() + self._start_block(block, "tool")
        if kind == "args":
            delta = {"type": "input_json_delta", "partial_json": op[2]}
            return frame(
                {"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}, "content_block_delta"
            )
        error = {"type": "error", "error": {"type": "api_error", "message": str(op[1].get("message", op[1]))}}
        return frame(error, "error")

    def _start_block(self, block: dict[str, Any], kind: str) -> bytes:
        self.blocks += 1
        self.open = kind
        return frame(
            {"type": "content_block_start", "index": self.blocks - 1, "content_block": block}, "content_block_start"
        )

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        self.open = None
        return frame({"type": "content_block_stop", "index": self.blocks - 1}, "content_block_stop")

    def finish(self) -> bytes:
        out = [self._apply(op) for _, data in self.decoder.flush() for op in self.deltas.read(data)]
        out.append(self._close())
        turn = self.turn
        if turn.error is None:
            stop = STOP_REASONS.get(turn.finish_reason or "stop", "end_turn")
            delta = {"stop_reason": stop, "stop_sequence": None}
            out.append(frame({"type": "message_delta", "delta": delta, "usage": _usage(turn.usage)}, "message_delta"))
            out.append(frame({"type": "message_stop"}, "message_stop"))
        return b"".join(out)


def count_tokens_reply(count: int) -> bytes:
    return orjson.dumps({"input_tokens": count})


def anthropic_headers(upstream_headers: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """Anthropic upstreams authenticate with `x-api-key` and want `anthropic-version`."""
    out = {"anthropic-version": extra.get("anthropic-version", DEFAULT_VERSION)}
    auth = upstream_headers.get("Authorization", "")
    if auth.startswith("Bearer "):
        out["x-api-key"] = auth[7:]
    return out


def native_headers(call: WireCall, base: dict[str, str]) -> dict[str, str]:
    """Headers for a native pass-through: the client's protocol headers, and Anthropic's auth."""
    if call.protocol == PROTOCOL:
        return {
            **base,
            **{k: v for k, v in call.extra_headers.items() if k != "anthropic-version"},
            **anthropic_headers(base, call.extra_headers),
        }
    return {**base, **call.extra_headers}
