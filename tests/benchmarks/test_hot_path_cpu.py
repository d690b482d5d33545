"""`benchmarks/hot_path_cpu.py` drives the app `evolvable serve` builds and counts only answered calls: a
short worker run answers every call 200 and captures each of them (it refuses to print a figure otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_worker_measures_calls_the_app_answered(tmp_path: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", EVOLVABLE_HOME=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    command = [sys.executable, str(ROOT / "benchmarks" / "hot_path_cpu.py"), "--worker", "--calls", "64"]
    done = subprocess.run(
        [*command, "--rounds", "2", "--concurrency", "4"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    assert len(figures) == 2 and all(0 < us < 100_000 for us in figures)
