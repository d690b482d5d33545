"""The OpenAI Responses API (`POST /v1/responses`) as an adapter onto chat completions.

Request: `instructions`, `input` (a string or items: messages, `function_call`, `function_call_output`),
function `tools`, `tool_choice`, sampling fields -> a chat body. Answer: a chat reply or chunk stream ->
a `response` object or the Responses event stream. Function-call ids are the chat tool-call ids, so a
`function_call_output.call_id` links to the `tool_calls[].id` the proxy recorded.
"""

from __future__ import annotations

import time
from typing import Any

from evolvable.http_errors import openai_error_body
from evolvable.proxy.wire.base import WireError, WireRequest, require, require_list
from evolvable.proxy.wire.sse import AssistantTurn, ChatDeltas, SSEDecoder, frame

PROTOCOL = "responses"
NATIVE_PATH = "/v1/responses"
ID_PREFIX = "resp_"

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = {"input_text", "output_text", "text", "refusal"}
_IGNORED_ITEMS = {"reasoning"}
_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "parallel_tool_calls": "parallel_tool_calls"}


def render_error(status: int, message: str, code: str = "invalid_request_error", param: str | None = None) -> bytes:
    """The Responses API's error body is OpenAI's: `{"error": {message, type, code, param}}`."""
    error_type = "invalid_request_error" if status < 500 else "server_error"
    return openai_error_body(message, error_type, code, param)


def rewrap_error(status: int, raw: bytes) -> bytes:
    """Errors from the hot path or the upstream are OpenAI-shaped already."""
    return raw


# --------------------------------------------------------------------------- request


def parse(body: dict[str, Any]) -> WireRequest:
    """Validate a Responses request and build the chat body (history is added by `with_history`)."""
    model = body.get("model")
    require(isinstance(model, str) and bool(model), "'model' is required and must be a string", "model")
    instructions = body.get("instructions")
    require(instructions is None or isinstance(instructions, str), "'instructions' must be a string", "instructions")
    raw_input = body.get("input")
    require(
        isinstance(raw_input, str | list) and bool(raw_input),
        "'input' is required: a string or a non-empty list of items",
        "input",
    )
    previous = body.get("previous_response_id")
    require(
        previous is None or isinstance(previous, str), "'previous_response_id' must be a string", "previous_response_id"
    )
    store = body.get("store", True)
    require(isinstance(store, bool), "'store' must be a boolean", "store")
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(raw_input, str):
        messages.append({"role": "user", "content": raw_input})
    elif isinstance(raw_input, list):
        messages.extend(input_messages(raw_input))
    chat: dict[str, Any] = {"model": model, "messages": messages}
    tools = body.get("tools")
    if tools:
        require(isinstance(tools, list), "'tools' must be a list", "tools")
        chat["tools"] = [_tool(t, i) for i, t in enumerate(tools)]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    for field, target in _SAMPLING.items():
        if body.get(field) is not None:
            chat[target] = body[field]
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None:
        require(
            isinstance(max_tokens, int) and max_tokens >= 1, "'max_output_tokens' must be >= 1", "max_output_tokens"
        )
        chat["max_tokens"] = max_tokens
    if isinstance(body.get("user"), str):
        chat["user"] = body["user"]
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    stream = body.get("stream", False)
    require(isinstance(stream, bool), "'stream' must be a boolean", "stream")
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return WireRequest(native=body, chat=chat, stream=stream, store=store)


def with_history(request: WireRequest, history: list[dict[str, Any]]) -> WireRequest:
    """The previous response's conversation goes after this request's instructions, before its input."""
    messages = request.chat["messages"]
    head = 1 if request.native.get("instructions") else 0
    request.chat["messages"] = [*messages[:head], *history, *messages[head:]]
    return request


def conversation(request: WireRequest, answer: dict[str, Any]) -> list[dict[str, Any]]:
    """What a later `previous_response_id` continues from: history, input and answer, without instructions."""
    messages = request.chat["messages"]
    head = 1 if request.native.get("instructions") else 0
    return [*messages[head:], answer]


def input_messages(items: list[Any]) -> list[dict[str, Any]]:
    """Input items -> chat messages. Consecutive function calls join the assistant turn before them."""
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        require(isinstance(item, dict), f"{where} must be an object", where)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, where))
        elif kind == "function_call":
            for key in ("call_id", "name", "arguments"):
                require(isinstance(item.get(key), str), f"{where}.{key} must be a string", f"{where}.{key}")
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            require(isinstance(item.get("call_id"), str), f"{where}.call_id must be a string", f"{where}.call_id")
            messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": _output_text(item.get("output"), where)}
            )
        elif kind in _IGNORED_ITEMS:
            continue
        else:
            raise WireError(
                400,
                f"{where}: input item type {kind!r} is not supported by this proxy",
                "unsupported_input_item",
                f"{where}.type",
            )
    return messages


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = _ROLES.get(item.get("role"))  # type: ignore[arg-type]
    require(role is not None, f"{where}.role must be user, assistant, system or developer", f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    content = require_list(content, f"{where}.content must be a string or a list of parts", f"{where}.content")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        require(isinstance(part, dict), f"{at} must be an object", at)
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            text = part.get("text", part.get("refusal"))
            require(isinstance(text, str), f"{at}.text must be a string", f"{at}.text")
            parts.append({"type": "text", "text": text})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append(
                {"type": "image_url", "image_url": {"url": part["image_url"], "detail": part.get("detail", "auto")}}
            )
        else:
            raise WireError(
                400, f"{at}: content part {kind!r} is not supported by this proxy", "unsupported_content", f"{at}.type"
            )
    if all(p["type"] == "text" for p in parts):
        return {"role": role, "content": "".join(p["text"] for p in parts)}
    require(role == "user", f"{where}: only user messages may hold images", f"{where}.content")
    return {"role": role, "content": parts}


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    require(isinstance(output, list), f"{where}.output must be a string or a list of parts", f"{where}.output")
    texts = [p.get("text") for p in output if isinstance(p, dict) and p.get("type") in _TEXT_PARTS]
    require(
        len(texts) == len(output) and all(isinstance(t, str) for t in texts),
        f"{where}.output: only text parts are supported",
        f"{where}.output",
    )
    return "".join(texts)  # type: ignore[arg-type]


def _tool(tool: Any, i: int) -> dict[str, Any]:
    where = f"tools[{i}]"
    require(isinstance(tool, dict), f"{where} must be an object", where)
    if tool.get("type") != "function":
        raise WireError(
            400,
            f"{where}: tool type {tool.get('type')!r} is not supported (only function tools)",
            "unsupported_tool",
            f"{where}.type",
        )
    require(isinstance(tool.get("name"), str) and bool(tool["name"]), f"{where}.name is required", f"{where}.name")
    function: dict[str, Any] = {
        "name": tool["name"],
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
    }
    if tool.get("description"):
        function["description"] = tool["description"]
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise WireError(
        400,
        "'tool_choice' must be auto, none, required or {type: function, name}",
        "invalid_request_error",
        "tool_choice",
    )


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise WireError(
        400, f"text.format type {fmt.get('type')!r} is not supported", "invalid_request_error", "text.format"
    )


# --------------------------------------------------------------------------- answer


def _usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def _call_item(call: dict[str, Any], status: str) -> dict[str, Any]:
    return {
        "id": f"fc_{call['id']}",
        "type": "function_call",
        "call_id": call["id"],
        "name": call["name"],
        "arguments": call["arguments"] if status == "completed" else "",
        "status": status,
    }


def output_items(response_id: str, turn: AssistantTurn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.has_text and (turn.text or not turn.tool_calls):
        items.append(_message_item(f"msg_{response_id[len(ID_PREFIX) :]}", turn.text, "completed"))
    items.extend(_call_item(c, "completed") for c in turn.tool_calls)
    return items


def response_object(
    response_id: str, request: WireRequest, turn: AssistantTurn | None, created_at: int, status: str
) -> dict[str, Any]:
    """The `response` object, echoing the request's settings as OpenAI does."""
    native = request.native
    incomplete = turn is not None and turn.finish_reason == "length"
    if status == "completed" and incomplete:
        status = "incomplete"
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "model": (turn.model if turn and turn.model else None) or native.get("model"),
        "output": output_items(response_id, turn) if turn is not None else [],
        "output_text": turn.text if turn is not None else "",
        "usage": _usage(turn.usage) if turn is not None else None,
        "error": {"code": "server_error", "message": str(turn.error.get("message", turn.error))}
        if turn and turn.error
        else None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": native.get("instructions"),
        "metadata": native.get("metadata") or {},
        "tools": [_echo_tool(t) for t in native.get("tools") or ()],
        "tool_choice": native.get("tool_choice", "auto"),
        "parallel_tool_calls": native.get("parallel_tool_calls", True),
        "temperature": native.get("temperature"),
        "top_p": native.get("top_p"),
        "max_output_tokens": native.get("max_output_tokens"),
        "previous_response_id": native.get("previous_response_id"),
        "store": request.store,
        "text": native.get("text") or {"format": {"type": "text"}},
        "truncation": "disabled",
        "user": native.get("user"),
    }


def _echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }


def reply(chat_reply: dict[str, Any], response_id: str, request: WireRequest) -> tuple[dict[str, Any], AssistantTurn]:
    turn = AssistantTurn.from_chat_reply(chat_reply)
    return response_object(response_id, request, turn, int(time.time()), "completed"), turn


class StreamTranslator:
    """Chat chunks in, Responses events out. One output item is open at a time: a text message, or a
    function call; a new one closes the one before (as OpenAI's own stream does)."""

    def __init__(self, response_id: str, request: WireRequest) -> None:
        self.response_id, self.request = response_id, request
        self.created_at = int(time.time())
        self.decoder = SSEDecoder()
        self.deltas = ChatDeltas()
        self.seq = 0
        self.items: list[dict[str, Any]] = []
        self.open: tuple[str, int] | None = None  # ("text", output_index) or ("tool", slot)
        self.text_start = 0  # where the open message item's text starts in the turn's text

    @property
    def turn(self) -> AssistantTurn:
        return self.deltas.turn

    def _event(self, kind: str, **fields: Any) -> bytes:
        self.seq += 1
        return frame({"type": kind, "sequence_number": self.seq - 1, **fields}, kind)

    def start(self) -> bytes:
        shell = response_object(self.response_id, self.request, None, self.created_at, "in_progress")
        return self._event("response.created", response=shell) + self._event("response.in_progress", response=shell)

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        for _, data in self.decoder.feed(chunk):
            for op in self.deltas.read(data):
                out.append(self._apply(op))
        return b"".join(out)

    def _apply(self, op: tuple[Any, ...]) -> bytes:
        kind = op[0]
        if kind == "text":
            out = b""
            if not (self.open and self.open[0] == "text"):
                out = self._close() + self._open_text(len(self.turn.text) - len(op[1]))
            index = self.open[1]  # type: ignore[index]
            return out + self._event(
                "response.output_text.delta",
                item_id=self.items[index]["id"],
                output_index=index,
                content_index=0,
                delta=op[1],
                logprobs=[],
            )
        if kind == "tool":
            out = self._close()
            call = self.turn.tool_calls[op[1]]
            item = _call_item(call, "in_progress")
            self.items.append(item)
            self.open = ("tool", op[1])
            return out + self._event("response.output_item.added", output_index=len(self.items) - 1, item=item)
        if kind == "args":
            index = len(self.items) - 1
            return self._event(
                "response.function_call_arguments.delta",
                item_id=self.items[index]["id"],
                output_index=index,
                delta=op[2],
            )
        message = str(op[1].get("message", op[1]))
        return self._event("error", code=op[1].get("code") or "server_error", message=message, param=None)

    def _open_text(self, text_start: int) -> bytes:
        item = _message_item(f"msg_{self.response_id[len(ID_PREFIX) :]}_{len(self.items)}", "", "in_progress")
        self.items.append(item)
        index = len(self.items) - 1
        self.open = ("text", index)
        self.text_start = text_start
        part = {"type": "output_text", "text": "", "annotations": []}
        return self._event("response.output_item.added", output_index=index, item=item) + self._event(
            "response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part
        )

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        kind, ref = self.open
        self.open = None
        index = len(self.items) - 1
        item = self.items[index]
        if kind == "text":
            text = self.turn.text[self.text_start :]
            done = _message_item(item["id"], text, "completed")
            self.items[index] = done
            part = done["content"][0]
            return (
                self._event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
                + self._event(
                    "response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part
                )
                + self._event("response.output_item.done", output_index=index, item=done)
            )
        done = _call_item(self.turn.tool_calls[ref], "completed")
        self.items[index] = done
        return self._event(
            "response.function_call_arguments.done",
            item_id=item["id"],
            output_index=index,
            arguments=done["arguments"],
            name=done["name"],
        ) + self._event("response.output_item.done", output_index=index, item=done)

    def finish(self) -> bytes:
        out: list[bytes] = []
        for _, data in self.decoder.flush():
            for op in self.deltas.read(data):
                out.append(self._apply(op))
        out.append(self._close())
        turn = self.turn
        failed = turn.error is not None
        final = response_object(
            self.response_id, self.request, turn, self.created_at, "failed" if failed else "completed"
        )
        final["output"] = self.items
        kind = (
            "response.failed"
            if failed
            else "response.incomplete"
            if final["status"] == "incomplete"
            else "response.completed"
        )
        out.append(self._event(kind, response=final))
        return b"".join(out)
