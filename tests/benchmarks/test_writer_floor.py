"""`benchmarks/writer_floor.py`: both the writer and the floor store every record they are given."""

from __future__ import annotations

import pytest
from tests.benchmarks.loading import load_benchmark


@pytest.mark.parametrize("mode", ["writer", "writer, events", "floor", "floor, checked"])
def test_each_mode_stores_every_record(mode: str) -> None:
    figures = load_benchmark("writer_floor").run_worker(mode, 300)  # (not a whole number of batches)
    assert figures["stored_calls"] == 300
    assert figures["us_per_call"] > 0
