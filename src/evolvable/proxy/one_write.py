"""A reply with a known length reaches the socket in one write: status line, headers and body together.

uvicorn's httptools cycle writes `http.response.start` and each `http.response.body` to the transport
as they come; uvloop sends each write at once, so a plain reply costs two `send` calls and, with
TCP_NODELAY, two segments: the client wakes for the headers, then again for the body. The bare aiohttp
floor sends one. Here the start of a response that declares `content-length` is held until its body
arrives; if that body is the whole reply (`more_body` false) both go out in one write. Anything else
(streams, chunked replies, a body sent in parts) is written exactly as before.
"""

from __future__ import annotations

import weakref
from collections.abc import MutableMapping
from typing import Any

Message = MutableMapping[str, Any]


class _Gathered:
    """Stands in for the transport while one reply is sent: writes are gathered, the rest passes through."""

    __slots__ = ("parts", "transport")

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def close(self) -> None:  # `connection: close` replies close right after their body
        self.flush()
        self.transport.close()

    def flush(self) -> None:
        if self.parts:
            data = self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)
            self.parts = []
            self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def _declares_length(message: Message) -> bool:
    return any(name.lower() == b"content-length" for name, _ in message.get("headers", ()))


class OneWriteSend:
    """`cycle.send` for uvicorn's `RequestResponseCycle`, writing a whole reply of known length at once.

    Set as the cycle's `send`, it holds the cycle weakly: a strong reference back would make every
    request's cycle (its scope, event, task...) cyclic garbage, which only the garbage collector frees,
    in pauses of the event loop."""

    __slots__ = ("_cycle", "_held")

    def __init__(self, cycle: Any) -> None:
        self._cycle = weakref.ref(cycle)
        self._held: Message | None = None

    async def __call__(self, message: Message) -> None:
        cycle = self._cycle()
        if cycle is None:  # pragma: no cover - the cycle's task holds it while the app runs
            return
        send = type(cycle).send
        kind = message["type"]
        if kind == "http.response.start":
            if not cycle.response_started and _declares_length(message):
                self._held = message  # not written yet: a later start (uvicorn's 500) simply replaces it
                return
            self._held = None
            await send(cycle, message)
            return
        start, self._held = self._held, None
        if start is None:
            await send(cycle, message)
            return
        if kind != "http.response.body" or message.get("more_body", False) or cycle.flow.write_paused:
            await send(cycle, start)
            await send(cycle, message)
            return
        transport = cycle.transport
        gathered = cycle.transport = _Gathered(transport)
        try:
            await send(cycle, start)
            await send(cycle, message)
        finally:
            cycle.transport = transport
            gathered.flush()
