"""Server-sent events: splitting a byte stream into events, and framing events to send."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson


def as_dict(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (wire input is untrusted)."""
    return value if isinstance(value, dict) else {}


def frame(data: dict[str, Any], event: str | None = None) -> bytes:
    """One SSE event; `event:` named as the Responses and Messages streams do."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


class SSEDecoder:
    """Feeds bytes, yields `(event name, parsed data)` per complete event; keeps a partial event pending.
    `[DONE]` and unparseable payloads are skipped (the raw stream is what the capture record keeps)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> Iterator[tuple[str | None, Any]]:
        data = (self._pending + chunk).replace(b"\r\n", b"\n")
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._pending = data
            return
        complete, self._pending = data[:cut], data[cut + 2 :]
        for block in complete.split(b"\n\n"):
            yield from _parse_block(block)

    def flush(self) -> Iterator[tuple[str | None, Any]]:
        rest, self._pending = self._pending, b""
        if rest.strip():
            yield from _parse_block(rest)


def _parse_block(block: bytes) -> Iterator[tuple[str | None, Any]]:
    event, payload = None, []
    for line in block.split(b"\n"):
        if line.startswith(b"event:"):
            event = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            payload.append(line[5:].strip())
    if not payload:
        return
    body = b"\n".join(payload)
    if body == b"[DONE]":
        return
    try:
        yield event, orjson.loads(body)
    except orjson.JSONDecodeError:
        return


def events_of(text: str) -> Iterator[tuple[str | None, Any]]:
    """All events of a complete SSE text (the writer's view of a recorded stream)."""
    decoder = SSEDecoder()
    yield from decoder.feed(text.encode())
    yield from decoder.flush()


@dataclass
class AssistantTurn:
    """The chat assistant message a stream or reply amounts to (text, tool calls, finish, usage)."""

    text: str = ""
    has_text: bool = False
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None
    error: dict[str, Any] | None = None

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.text if self.has_text else None}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": t["id"], "type": "function", "function": {"name": t["name"], "arguments": t["arguments"]}}
                for t in self.tool_calls
            ]
        return msg

    @classmethod
    def from_chat_reply(cls, reply: dict[str, Any]) -> AssistantTurn:
        turn = cls(usage=reply.get("usage") if isinstance(reply.get("usage"), dict) else None)
        turn.model = reply.get("model") if isinstance(reply.get("model"), str) else None
        choices = reply.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = as_dict(choice.get("message"))
        content = message.get("content")
        if isinstance(content, list):  # content parts: keep their text
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str):
            turn.text, turn.has_text = content, True
        for i, tc in enumerate(message.get("tool_calls") or ()):
            tc, fn = as_dict(tc), as_dict(as_dict(tc).get("function"))
            turn.tool_calls.append(
                {
                    "id": tc.get("id") or f"call_{i}",
                    "name": fn.get("name") or "",
                    "arguments": fn.get("arguments") or "",
                }
            )
        turn.finish_reason = choice.get("finish_reason")
        return turn


class ChatDeltas:
    """Reads chat-completion chunks (choice 0) into simple operations, accumulating the turn:

    `("text", piece)`, `("tool", index)` (a new tool call; see `turn.tool_calls[index]`),
    `("args", index, piece)`, `("error", body)`. Finish reason, usage and model land on `turn`."""

    def __init__(self) -> None:
        self.turn = AssistantTurn()
        self._slots: dict[int, int] = {}

    def read(self, chunk: Any) -> Iterator[tuple[Any, ...]]:
        if not isinstance(chunk, dict):
            return
        turn = self.turn
        if isinstance(chunk.get("error"), dict):
            turn.error = chunk["error"]
            yield ("error", chunk["error"])
            return
        if turn.model is None and isinstance(chunk.get("model"), str):
            turn.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            turn.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or int(choice.get("index", 0)) != 0:
                continue
            delta = as_dict(choice.get("delta"))
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                turn.text += piece
                turn.has_text = True
                yield ("text", piece)
            for tc in delta.get("tool_calls") or ():
                yield from self._tool_delta(tc)
            if choice.get("finish_reason") is not None:
                turn.finish_reason = choice["finish_reason"]

    def _tool_delta(self, tc: Any) -> Iterator[tuple[Any, ...]]:
        if not isinstance(tc, dict):
            return
        fn = as_dict(tc.get("function"))
        key = int(tc.get("index", 0))
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = len(self.turn.tool_calls)
            self.turn.tool_calls.append(
                {"id": tc.get("id") or f"call_{key}", "name": fn.get("name") or "", "arguments": ""}
            )
            yield ("tool", slot)
        elif fn.get("name"):
            self.turn.tool_calls[slot]["name"] += fn["name"]
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            self.turn.tool_calls[slot]["arguments"] += args
            yield ("args", slot, args)
