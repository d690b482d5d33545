"""`benchmarks/store_ingest.py --current-first` runs the current version before the baseline on each backend, so a
ratio can be read in both orders (on PostgreSQL the second run of a pair tended to be the slower)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.benchmarks.loading import load_benchmark


def _benchmark() -> ModuleType:
    return load_benchmark("store_ingest")


class _Databases:
    def create(self) -> str:
        return "postgresql+psycopg://server/throwaway"


@pytest.mark.parametrize(("current_first", "first"), [(False, "baseline"), (True, "current")])
def test_the_order_of_versions_on_each_backend(
    current_first: bool, first: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _benchmark()
    baseline = tmp_path / "baseline-tree"
    ran: list[tuple[str, str]] = []

    def spawn(backend: str, url: str, plan: dict[str, int], src: Path | None) -> dict[str, Any]:
        ran.append((backend, "baseline" if src == baseline else "current"))
        return {"backend": backend}

    monkeypatch.setattr(bench, "spawn_worker", spawn)
    results = bench.measure_all({}, _Databases(), baseline, tmp_path, current_first)
    second = "current" if first == "baseline" else "baseline"
    assert ran == [("sqlite", first), ("sqlite", second), ("postgresql", first), ("postgresql", second)]
    assert results["current"]["postgresql"] == {"backend": "postgresql"}
