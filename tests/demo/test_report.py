"""The demo report's lever-comparison section, from the evolution benchmark's results file."""

from __future__ import annotations

import json
from pathlib import Path

from evolvable.demo.report import _lever_comparison


def test_lever_comparison_lists_every_arm_and_tolerates_a_bad_file(tmp_path: Path) -> None:
    results = tmp_path / "evolution.json"
    arm = {"holdout_success": 0.27, "holdout_ci": [0.17, 0.41], "holdout_n": 48, "safety_pass": 1.0}
    results.write_text(
        json.dumps(
            {
                "arms": [
                    {"arm": "static", **arm, "holdout_success": 0.17, "decisions": []},
                    {"arm": "auto", **arm, "decisions": [{"lever": "memory", "state": "promoted"}]},
                ]
            }
        )
    )
    lines = _lever_comparison(results)
    assert "| static | 17% (17%-41%) n=48 | 100% |  |" in lines
    assert "| auto | 27% (17%-41%) n=48 | 100% | memory: promoted |" in lines
    assert _lever_comparison(tmp_path / "missing.json") == [] and _lever_comparison(None) == []
    results.write_text("{not json")
    assert "unreadable" in _lever_comparison(results)[-1]


def test_the_report_links_the_dashboard_on_its_own_store(tmp_path: Path) -> None:
    from evolvable.demo.report import _dashboard_section

    lines = "\n".join(_dashboard_section(tmp_path))
    assert "http://127.0.0.1:8400/ui/" in lines
    assert f"--db sqlite:///{(tmp_path / 'evolvable.db').resolve()}" in lines
