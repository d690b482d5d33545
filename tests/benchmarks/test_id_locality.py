"""`benchmarks/id_locality.py` measures what it says: session calls with ids of the kind asked for, all stored."""

from __future__ import annotations

from types import ModuleType

import pytest
from tests.benchmarks.loading import load_benchmark


def _benchmark() -> ModuleType:
    return load_benchmark("id_locality")


@pytest.mark.parametrize("kind", ["uuid4", "new_id"])
def test_each_kind_of_id_is_what_the_sessions_get(kind: str) -> None:
    bench = _benchmark()
    events = [event for event, _ in bench.session_events(kind, 64, 2)]
    starts = [e for e in events if e.type == "trajectory_started"]
    assert len(starts) == 64 and len([e for e in events if e.type == "step_appended"]) == 128
    ids = [e.trajectory_id for e in starts]
    version = "7" if kind == "new_id" else "4"
    assert all(tid.startswith("traj_") and tid[5 + 12] == version for tid in ids)


def test_a_worker_stores_every_call_and_reports_each_quarter() -> None:
    bench = _benchmark()
    figures = bench.run_worker("new_id", 1000, 3, None)  # (6 waves, 1,152 calls; 7.5 batches: the last is partial)
    assert figures["stored_calls"] == figures["calls"] >= 1000
    assert len(figures["quarters"]) == 4
    assert all(q["cpu_us_per_call"] > 0 and q["wall_us_per_call"] > 0 for q in figures["quarters"])
