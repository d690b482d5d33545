"""A vLLM-shaped LoRA endpoint (`POST /v1/load_lora_adapter`) that records what it was asked to load."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class LoraServerState:
    url: str = ""
    received: list[tuple[str, dict]] = field(default_factory=list)
    refuse: bool = False


@contextmanager
def fake_lora_server() -> Iterator[LoraServerState]:
    state = LoraServerState()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.received.append((self.path, body))
            status = 400 if state.refuse else 200
            payload = b'{"error": {"message": "bad adapter"}}' if status == 400 else b"Success"
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
