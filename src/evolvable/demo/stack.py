"""A local rollout stack: the embedded policy server and the proxy in background threads.

Used by the demo, the RL benchmark and the alignment tests (it sits at the top layer: it builds a
proxy and a policy server, which the trainer must never know): episodes run through the proxy exactly as live
traffic would, so the stored trajectories carry the engine's token ids and logprobs.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolvable.errors import EvolvableError

__all__ = ["LocalStack", "ServerThread", "local_stack"]


class ServerThread:
    """An ASGI app on uvicorn in a daemon thread, on a free port."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.app = app
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise EvolvableError("a local server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(30)
        self._sock.close()


@dataclass
class LocalStack:
    engine: Any
    policy_server: ServerThread
    proxy: ServerThread
    store: Any

    @property
    def proxy_v1(self) -> str:
        return self.proxy.url + "/v1"

    @property
    def policy_v1(self) -> str:
        return self.policy_server.url + "/v1"

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until everything the proxy captured is in the store."""
        runtime = self.proxy.app.state.proxy
        spool = runtime.spool
        end = spool.wait_written(spool.enqueued, timeout_s)
        wait_applied = getattr(spool, "wait_applied", None) or spool.wait_checkpoint  # renamed in the proxy
        if end is None or not wait_applied(end, timeout_s):
            raise EvolvableError("the proxy's writer did not catch up")


@contextmanager
def local_stack(model: Any, tokenizer: Any, workdir: str | Path, *, max_batch: int = 16):
    """Policy server (on `model`) + proxy (SQLite store under `workdir`), stopped on exit."""
    from evolvable.policy_server.app import create_app as policy_app
    from evolvable.policy_server.engine import Engine
    from evolvable.proxy.app import create_app as proxy_app
    from evolvable.proxy.config import ProxyConfig, UpstreamConfig
    from evolvable.store import Store

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    engine = Engine(model, tokenizer, max_batch=max_batch)
    policy = ServerThread(policy_app(engine)).start()
    store = Store.open(f"sqlite:///{workdir / 'store.db'}")
    config = ProxyConfig(
        upstreams=[UpstreamConfig(name="policy", base_url=policy.url + "/v1")], spool_dir=workdir / "spool"
    ).validate()
    proxy = ServerThread(proxy_app(config, store)).start()
    try:
        yield LocalStack(engine, policy, proxy, store)
    finally:
        proxy.stop()
        policy.stop()
        engine.stop()
        store.close()
