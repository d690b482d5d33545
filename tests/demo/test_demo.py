"""The main job end to end on the real embedded model, scaled down: policy server, proxy with
governance and the harness router, live episodes with signals, a control-plane tick, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolvable.control.models import Lever
from evolvable.demo import DemoConfig, run_demo
from evolvable.protocol import Trajectory


@pytest.mark.slow
def test_demo_runs_the_loop_and_writes_a_report(tmp_path: Path) -> None:
    cfg = DemoConfig(
        report_dir=tmp_path / "report",
        quick=True,
        levers=frozenset({Lever.memory, Lever.skill}),
        rounds=1,
        round_size=6,
        report_tasks=6,
        gate_tasks=6,
        safety_tasks=2,
        max_tokens=24,
        max_turns=2,
    )
    summary = run_demo(cfg)
    out = cfg.report_dir
    for name in (
        "summary.json",
        "decisions.json",
        "report.md",
        "trajectories.jsonl",
        "success_by_intent.png",
        "live_rounds.png",
    ):
        assert (out / name).stat().st_size > 0, name
    assert json.loads((out / "summary.json").read_text())["rounds"][0]["episodes"] == 6
    assert summary["baseline"]["report_set"]["overall"]["n"] == 6
    assert summary["after"]["report_set"]["overall"]["n"] == 6
    # Every live episode went through the proxy: a complete trajectory with tool steps and signals,
    # recorded under the harness version the proxy applied.
    live = [Trajectory.model_validate_json(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(live) == 6
    for t in live:
        assert t.status in ("completed", "failed")
        assert t.harness_version and t.llm_calls()
        assert t.outcome() is not None
        for call in t.llm_calls():
            # Engine token ids are captured; governance redacts them with the embedded model's tokenizer
            # wherever it redacted the call's text (the ticket's email), so the calls stay usable for RL.
            assert call.has_token_ids or call.metadata.get("token_ids_dropped") == "redaction_mismatch"
        assert "@" not in str(t.task_input), "the ticket's email address is redacted before storage"
    calls = [call for t in live for call in t.llm_calls()]
    assert sum(bool(call.metadata.get("token_ids_redacted")) for call in calls) >= len(live)
    assert any(t.tool_calls() for t in live)
    # The starting harness is registered and active; every decision (if any) has a state.
    assert any(v["state"] == "active" and v["kind"] == "harness" for v in summary["versions"])
    report = (out / "report.md").read_text()
    assert "## Versions" in report and all(f"`{v['id']}`" in report for v in summary["versions"])
    assert all(d["state"] for d in summary["decisions"])
