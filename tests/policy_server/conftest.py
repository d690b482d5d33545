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

    # EVOLVABLE_TEST_DEVICE=cuda runs these tests on a GPU (bfloat16 unless EVOLVABLE_TEST_DTYPE says otherwise).
    device = os.environ.get("EVOLVABLE_TEST_DEVICE")
    if not device:
        return load_base_model()
    from evolvable.model_loading import resolve_device, resolve_dtype

    where = resolve_device(device)
    return load_base_model(dtype=resolve_dtype(os.environ.get("EVOLVABLE_TEST_DTYPE", "auto"), where), device=where)


@pytest.fixture(scope="session")
def served(base_model: tuple[Any, Any]) -> Iterator[Served]:
    with serve(*base_model) as running:
        yield running
