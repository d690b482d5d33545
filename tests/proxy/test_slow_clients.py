"""Slowloris: 500 connections that send their headers (or body) too slowly are cut off at the read
deadline, and the proxy keeps serving everyone else meanwhile. The real proxy on uvicorn (httptools)."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from typing import Any

import httpx
import uvicorn
from tests.proxy.conftest import make_config

from evolvable.proxy.app import create_app
from evolvable.proxy.slow_clients import with_read_deadline
from evolvable.store import Store


class GuardedServer:
    def __init__(self, app: Any, read_timeout_s: float) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            app, loop="uvloop", http=with_read_deadline(read_timeout_s), log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> GuardedServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(30)
        self._sock.close()


def _closed_by_server(sock: socket.socket) -> bool:
    # poll, not select: in a long test run descriptors pass FD_SETSIZE (1024), which select() cannot take.
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    if not poller.poll(0):
        return False
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, BlockingIOError):
        return True
    return True


def test_slow_clients_are_cut_off_and_others_are_served(upstream: Any, sqlite_store: Store, tmp_path: Any) -> None:
    app = create_app(make_config(upstream.url, tmp_path / "spool"), sqlite_store)
    with GuardedServer(app, read_timeout_s=1.0) as server:
        slow: list[socket.socket] = []
        for i in range(500):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.setblocking(False)
            if i % 2:
                s.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\n")  # headers never finish
            else:
                s.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\ncontent-length: 100\r\n\r\n{")  # nor the body
            slow.append(s)
        r = httpx.post(f"http://127.0.0.1:{server.port}/v1/sessions", json={"agent": "a"}, timeout=10)
        assert r.status_code == 201  # served while 500 slow connections are open
        deadline = time.monotonic() + 60
        while slow:
            assert time.monotonic() < deadline, f"{len(slow)} slow connections still open"
            for s in [s for s in slow if _closed_by_server(s)]:
                s.close()
                slow.remove(s)
            for s in slow[:50]:  # keep trickling bytes: a trickle must not extend the deadline
                with contextlib.suppress(OSError):
                    s.send(b"x")
            time.sleep(0.1)
        r = httpx.post(f"http://127.0.0.1:{server.port}/v1/sessions", json={"agent": "a"}, timeout=10)
        assert r.status_code == 201
