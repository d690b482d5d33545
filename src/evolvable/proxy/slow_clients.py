"""A deadline for reading each request, so slow clients cannot hold connections forever (slowloris).

uvicorn's httptools protocol arms a timer only between requests of a kept-alive connection; a client
that opens a connection and sends its headers (or body) a byte at a time is never cut off. This
subclass arms a deadline when a connection opens and when a request begins, and clears it once the
request is fully read: whatever the client has not sent by then, it never will on this connection.
It also sends a reply of known length in one write (`one_write`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from evolvable.http_errors import openai_error_body
from evolvable.proxy.one_write import OneWriteSend

_TIMEOUT_BODY = openai_error_body("request not received in time", "invalid_request_error", "request_timeout")
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n\r\n" + _TIMEOUT_BODY
)


class DeadlineHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with a per-request read deadline (`read_timeout_s`, set by `with_read_deadline`)."""

    read_timeout_s = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_read_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear_read_deadline()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_read_deadline()

    def on_message_complete(self) -> None:
        self._clear_read_deadline()
        super().on_message_complete()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        cycle.send = OneWriteSend(cycle)  # the app is handed `cycle.send` when its task first runs
        super()._start_asgi_task(cycle, app)

    def _arm_read_deadline(self) -> None:
        if self._read_deadline is None:
            self._read_deadline = self.loop.call_later(self.read_timeout_s, self._read_timed_out)

    def _clear_read_deadline(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # no response under way: say why we hang up
            self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()


def with_read_deadline(read_timeout_s: float) -> type[DeadlineHttpToolsProtocol]:
    """The protocol class to pass as uvicorn's `http=` with this deadline."""
    return type("DeadlineHttpToolsProtocol", (DeadlineHttpToolsProtocol,), {"read_timeout_s": read_timeout_s})
