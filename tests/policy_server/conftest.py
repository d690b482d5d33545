"""One real model per test session, served in-process on a free port."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from tests.policy_server.helpers import Served, serve

# Sleeping, not spinning, OpenMP threads (as the CLI sets); only effective if torch is not loaded yet.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def base_model() -> tuple[Any, Any]:
    from evolvable.model_loading import load_base_model

    return load_base_model()


@pytest.fixture(scope="session")
def served(base_model: tuple[Any, Any]) -> Iterator[Served]:
    with serve(*base_model) as running:
        yield running
