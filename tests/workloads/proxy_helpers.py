"""The real proxy app on uvicorn in a thread on a free port, in front of any upstream URL."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from evolvable.proxy.app import create_app
from evolvable.proxy.config import ProxyConfig, UpstreamConfig
from evolvable.store import Store


@contextmanager
def running_proxy(upstream_url: str, store: Store, spool_dir: Path) -> Iterator[tuple[str, object]]:
    """Yields (base URL with /v1, the proxy runtime)."""
    config = ProxyConfig(
        upstreams=[UpstreamConfig(name="up", base_url=upstream_url, timeout_s=600.0)],
        default_upstream="up",
        spool_dir=spool_dir,
        writer_mode="thread",
    )
    app = create_app(config, store)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("proxy did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", app.state.proxy
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def wait_for_store(runtime: object, timeout_s: float = 15.0) -> None:
    """Wait until every captured record is applied to the store."""
    assert runtime.wait_stored(timeout_s), "the proxy's writer did not catch up"  # type: ignore[attr-defined]
