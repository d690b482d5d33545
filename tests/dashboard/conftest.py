"""Fixtures: the mock upstream (shared with the proxy tests) and a served stack on each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.dashboard.stack import start_stack
from tests.proxy.mock_upstream import MockUpstream

from evolvable.store import Store


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    mock = MockUpstream().start()
    yield mock
    mock.stop()


@pytest.fixture
def stack(db_url: str, upstream: MockUpstream, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    store = Store.open(db_url)
    server, plane = start_stack(store, upstream.url, tmp_path / "spool")
    try:
        yield server, plane
    finally:
        server.stop()
        store.close()
