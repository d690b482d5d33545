"""A store the governor may use only as governing needs it: its engine (tenant policy, audit). Any other
use (reading a trajectory or header back) raises, so a test fails if the writer's governor reads what the
writer is writing."""

from __future__ import annotations

from typing import Any, cast

from evolvable.store import Store


class _EngineOnly:
    def __init__(self, store: Store) -> None:
        self.engine = store.engine

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the governor read the store back: Store.{name}")


def engine_only(store: Store) -> Store:
    """`store` with everything but its engine raising `AssertionError`."""
    return cast(Store, _EngineOnly(store))
