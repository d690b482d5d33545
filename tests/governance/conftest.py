"""Fixtures for governance tests: a store on each backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evolvable.store import Store


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url)
    try:
        yield s
    finally:
        s.close()
