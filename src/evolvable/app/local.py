"""A local rollout stack: an in-process policy server (on a model already in memory) and the proxy,
built by the composition root, in background threads.

Used by the RL benchmarks and the alignment tests: episodes run through the proxy exactly as live
traffic would, so the stored trajectories carry the engine's token ids and logprobs.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evolvable.errors import EvolvableError
from evolvable.store import Store

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from evolvable.policy_server.engine import Engine
    from evolvable.store import Store

__all__ = ["LocalStack", "ServerThread", "local_stack"]


class ServerThread:
    """An ASGI app on uvicorn in a daemon thread, on a free port."""

    def __init__(self, app: Starlette) -> None:
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
    engine: Engine
    policy_server: ServerThread
    proxy: ServerThread
    store: Store

    @property
    def proxy_v1(self) -> str:
        return self.proxy.url + "/v1"

    @property
    def policy_v1(self) -> str:
        return self.policy_server.url + "/v1"

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until everything the proxy captured is in the store."""
        if not self.proxy.app.state.proxy.wait_stored(timeout_s):
            raise EvolvableError("the proxy's writer did not catch up")


@contextmanager
def local_stack(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, workdir: str | Path, *, max_batch: int = 16
) -> Iterator[LocalStack]:
    """Policy server (on `model`) + the root's proxy (SQLite store under `workdir`, no governance or control:
    the recorded token ids must be the engine's own), stopped on exit."""
    from evolvable.app.config import parse_config
    from evolvable.app.stack import build_stack
    from evolvable.policy_server.app import create_app as policy_app
    from evolvable.policy_server.engine import Engine

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    engine = Engine(model, tokenizer, max_batch=max_batch)
    policy = ServerThread(policy_app(engine)).start()
    try:
        config = parse_config(
            {
                "store": {"url": f"sqlite:///{workdir / 'store.db'}"},
                "proxy": {"spool_dir": str(workdir / "spool")},
                "policy_servers": [{"name": "policy", "kind": "embedded", "url": policy.url}],
                "governance": {"enabled": False},
                "control": {"enabled": False},
            },
            source="the local rollout stack",
        )
        with build_stack(config) as stack:
            assert stack.app is not None  # build_stack always builds the app
            proxy = ServerThread(stack.app).start()
            try:
                yield LocalStack(engine, policy, proxy, stack.store)
            finally:
                proxy.stop()
    finally:
        policy.stop()
        engine.stop()
