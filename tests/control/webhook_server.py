"""A tiny HTTP server in a thread for webhook tests: `handler(payload) -> (status, body bytes)`."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handler = Callable[[dict[str, Any]], tuple[int, bytes]]


def json_reply(obj: Any, status: int = 200) -> tuple[int, bytes]:
    return status, json.dumps(obj).encode()


@contextmanager
def webhook_server(handler: Handler) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve `handler` on a free port; yields (url, payloads received)."""
    received: list[dict[str, Any]] = []

    class _Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            payload = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
            received.append(payload)
            status, body = handler(payload)
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/replay", received
    finally:
        server.shutdown()
        server.server_close()
