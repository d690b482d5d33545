"""Fixtures: a mock upstream, and the real proxy app on uvicorn in a thread on a free port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from tests.proxy.mock_upstream import MockUpstream

from evolvable.proxy.app import create_app
from evolvable.proxy.config import ModelAlias, ProxyConfig, UpstreamConfig
from evolvable.store import Store


class ProxyServer:
    """The proxy on uvicorn (uvloop + httptools, as `evolvable serve` runs it) in a background thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        config = uvicorn.Config(app, loop="uvloop", http="httptools", log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def runtime(self) -> Any:
        return self.app.state.proxy

    def start(self) -> ProxyServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("proxy did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(30)
        self._sock.close()

    def flush(self) -> None:
        """Wait until every captured record is in the store."""
        assert self.runtime.wait_stored(10), "writer did not catch up"


@pytest.fixture(scope="session")
def upstream() -> Iterator[MockUpstream]:
    mock = MockUpstream().start()
    yield mock
    mock.stop()


def make_config(upstream_url: str, spool_dir: Path, **overrides: Any) -> ProxyConfig:
    cfg = ProxyConfig(
        upstreams=[UpstreamConfig(name="mock", base_url=upstream_url, timeout_s=2.0)],
        models={"alias-a": ModelAlias(upstream="mock", served_model="mock")},
        spool_dir=spool_dir,
        **overrides,
    )
    return cfg


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'proxy.db'}")
    yield s
    s.close()


@pytest.fixture
def proxy_factory(upstream: MockUpstream, tmp_path: Path) -> Iterator[Any]:
    started: list[ProxyServer] = []

    def start(store: Store, **kwargs: Any) -> ProxyServer:
        overrides = kwargs.pop("config", {})
        cfg = make_config(upstream.url, tmp_path / f"spool{len(started)}", **overrides)
        server = ProxyServer(create_app(cfg, store, **kwargs)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def proxy(proxy_factory: Any, store: Store) -> ProxyServer:
    """The proxy on a store of each backend (the `db_url` parametrization)."""
    return proxy_factory(store)


@pytest.fixture
def lite_proxy(proxy_factory: Any, sqlite_store: Store) -> ProxyServer:
    """The proxy on SQLite only, for tests whose subject is not the store."""
    return proxy_factory(sqlite_store)


def new_session(server: ProxyServer, **body: Any) -> dict[str, Any]:
    r = httpx.post(f"{server.url}/v1/sessions", json={"agent": "tester", **body})
    assert r.status_code == 201, r.text
    return r.json()
