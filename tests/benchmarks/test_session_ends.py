"""`benchmarks/session_ends.py` ends every trajectory it opened, on both backends, fresh statistics or stale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.benchmarks.loading import load_benchmark


@pytest.mark.parametrize("stale_statistics", [False, True])
def test_a_worker_ends_every_trajectory_it_opened(db_url: str, stale_statistics: bool) -> None:
    figures = load_benchmark("session_ends").run_worker(db_url, 70, 16, stale_statistics)  # (the last batch: 6)
    assert figures["ended"] == 70
    assert figures["wall_us_per_end"] > 0 and figures["cpu_us_per_end"] > 0


def test_a_run_writes_what_it_measured_and_how_many_it_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "ends.json"
    argv = ["session_ends.py", "--trajectories", "40", "--batch", "16", "--rounds", "1", "--no-postgres"]
    monkeypatch.setattr("sys.argv", [*argv, "--results", str(out)])
    load_benchmark("session_ends").main()
    written = json.loads(out.read_text())
    assert written["stored"] == {"sqlite": {"current": 40}}
    assert written["best"]["sqlite"]["current"]["cpu_us_per_end"] > 0
    assert len(written["environment"]["load_average"]["speed_probe_ms"]) == 2
