"""A reply of known length reaches the transport in one write; streams, chunked and multi-part replies are
written as uvicorn writes them. Driven through uvicorn's own request/response cycle, so a change in how
uvicorn writes shows up here."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from evolvable.proxy.one_write import OneWriteSend


class Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def _cycle(transport: Transport, *, keep_alive: bool = True, method: str = "POST") -> Any:
    log = logging.getLogger("test")
    cycle: Any = RequestResponseCycle(
        scope={"type": "http", "method": method, "path": "/", "headers": []},  # type: ignore[typeddict-item]
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=log,
        access_logger=log,
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )
    cycle.send = OneWriteSend(cycle)
    return cycle


def _start(length: int | None, status: int = 200) -> dict[str, Any]:
    headers = [(b"content-type", b"application/json")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http.response.start", "status": status, "headers": headers}


def _body(data: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


async def test_a_reply_of_known_length_is_one_write() -> None:
    transport = Transport()
    cycle = _cycle(transport)
    await cycle.send(_start(7))
    assert transport.writes == []  # held until its body comes
    await cycle.send(_body(b'{"a":1}'))
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b'content-length: 7\r\n\r\n{"a":1}')
    assert cycle.response_complete
    assert cycle.transport is transport


async def test_connection_close_writes_before_closing() -> None:
    transport = Transport()
    cycle = _cycle(transport, keep_alive=False)
    await cycle.send(_start(2))
    await cycle.send(_body(b"{}"))
    assert len(transport.writes) == 1 and transport.writes[0].endswith(b"connection: close\r\n\r\n{}")
    assert transport.closed


async def test_a_stream_is_written_as_it_comes() -> None:
    transport = Transport()
    cycle = _cycle(transport)
    await cycle.send(_start(None))  # chunked: the headers go out at once (time to first byte)
    assert len(transport.writes) == 1
    await cycle.send(_body(b"data: 1\n\n", more=True))
    await cycle.send(_body(b""))
    assert len(transport.writes) == 3


async def test_a_known_length_body_in_parts_is_written_in_parts() -> None:
    transport = Transport()
    cycle = _cycle(transport)
    await cycle.send(_start(4))
    await cycle.send(_body(b"ab", more=True))
    assert len(transport.writes) == 2  # the held headers, then the first part
    await cycle.send(_body(b"cd"))
    assert len(transport.writes) == 3
    assert b"".join(transport.writes).endswith(b"\r\n\r\nabcd")


async def test_a_held_start_is_replaced_by_a_later_one() -> None:
    """An app that failed after its start (never written) gets uvicorn's 500 instead of a broken reply."""
    transport = Transport()
    cycle = _cycle(transport)
    await cycle.send(_start(7))
    await cycle.send(_start(21, status=500))
    await cycle.send(_body(b"Internal Server Error"))
    assert len(transport.writes) == 1 and transport.writes[0].startswith(b"HTTP/1.1 500 ")


async def test_a_body_longer_than_declared_still_fails() -> None:
    transport = Transport()
    cycle = _cycle(transport)
    await cycle.send(_start(1))
    with pytest.raises(RuntimeError, match="longer than Content-Length"):
        await cycle.send(_body(b"too long"))
    assert cycle.transport is transport


async def test_head_replies_declare_a_length_and_send_no_body() -> None:
    transport = Transport()
    cycle = _cycle(transport, method="HEAD")
    await cycle.send(_start(7))
    await cycle.send(_body(b""))
    assert len(transport.writes) == 1 and transport.writes[0].endswith(b"content-length: 7\r\n\r\n")


async def test_a_cycle_is_freed_without_the_garbage_collector() -> None:
    """Per request: a reference cycle here would leave every request's objects to the collector's pauses."""
    transport = Transport()
    cycle = _cycle(transport)
    await cycle.send(_start(2))
    await cycle.send(_body(b"{}"))
    gone = weakref.ref(cycle)
    gc.disable()
    try:
        del cycle
        assert gone() is None
    finally:
        gc.enable()
