"""Lever choice from evidence: expected gain per cost from the statistics and past verdicts, and the
calibration of the predicted effect against the measured one."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from tests.control.conftest import AGENT, ScriptedRunner, base_harness, tasks
from tests.control.test_decision import CFG, ctx, group, stats
from tests.control.test_runtime import config, live_batch

from evolvable.control.decision import decide
from evolvable.control.gates import ReplaySuite
from evolvable.control.lever_choice import calibration, expect, gap_of
from evolvable.control.models import Decision, DecisionState, Lever, Verdict
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlPlane


def past(lever: Lever, state: DecisionState, verdict=None, improve=("refund",), effect=None, gap=None) -> Decision:
    now = datetime.now(UTC)
    return Decision(
        id=f"dec_{lever.value}_{state.value}",
        agent=AGENT,
        lever=lever,
        state=state,
        predicted={"improve": list(improve), **({"effect": effect, "gap": gap, "p_success": 0.5} if gap else {})},
        verdict=verdict,
        verdict_detail={"measured_on": "live", "measured_effect": 0.2} if verdict else None,
        created_at=now,
        updated_at=now,
    )


def both_apply():
    """Refund fails with successes to copy (memory) and a recurring label (skill)."""
    return stats({"refund": group(10, 2, {"wrong_tool": 8}), "order_status": group(10, 10)})


def test_expectation_is_hand_computable() -> None:
    s = both_apply()
    assert gap_of(s, ["refund"], 0.9) == pytest.approx(0.5 * 0.7)
    e = expect(Lever.memory, ["refund"], s, [], 0.9)
    assert e.p_success == pytest.approx(0.5) and e.closure == 0.5
    assert e.effect == pytest.approx(0.5 * 0.5 * 0.35) and e.score == pytest.approx(e.effect / 1.0)
    history = [past(Lever.skill, DecisionState.promoted, Verdict.effective, effect=0.1, gap=0.35)] * 2
    e = expect(Lever.skill, ["refund"], s, history, 0.9)
    assert e.p_success == pytest.approx((2 * 0.35 + 2) / 4) and e.history == 2
    assert e.closure == pytest.approx(0.2 / 0.35)  # learned from the measured effects


def test_without_history_the_cheaper_lever_wins_and_the_ranking_is_recorded() -> None:
    proposal, trace = decide(ctx(both_apply()), CFG)
    assert proposal.lever == Lever.memory
    assert [r["lever"] for r in proposal.evidence["ranking"]] == ["memory", "skill", "prompt"]
    assert any(t.startswith("skill: applies, ranked below memory") for t in trace)
    assert proposal.expected["effect"] > 0


def test_past_verdicts_move_the_choice_to_the_lever_that_worked_here() -> None:
    history = [past(Lever.memory, DecisionState.gated_out)] * 4
    history += [past(Lever.skill, DecisionState.promoted, Verdict.effective)] * 3
    proposal, _ = decide(replace(ctx(both_apply()), history=history), CFG)
    assert proposal.lever == Lever.skill
    ranking = proposal.evidence["ranking"]
    assert ranking[0]["history"] == 3 and ranking[1]["lever"] == "memory" and ranking[1]["history"] == 4
    other_cluster = [past(Lever.memory, DecisionState.gated_out, improve=("password_reset",))] * 4
    assert decide(replace(ctx(both_apply()), history=other_cluster), CFG)[0].lever == Lever.memory
    fixed = replace(CFG, rank_by_evidence=False)  # the cascade, for ablations
    assert decide(replace(ctx(both_apply()), history=history), fixed)[0].lever == Lever.memory


def test_calibration_compares_predicted_and_measured() -> None:
    a = past(Lever.memory, DecisionState.promoted, Verdict.effective, effect=0.1, gap=0.3)
    b = past(Lever.skill, DecisionState.gated_out, effect=0.05, gap=0.3)
    out = calibration([a, b])
    assert out["effects_measured"] == 1 and out["effect_mae"] == pytest.approx(0.1)
    assert out["outcomes"] == 2 and out["brier"] == pytest.approx(((0.5 - 1) ** 2 + 0.5**2) / 2)


def test_decision_records_carry_a_predicted_effect_that_the_verdict_scores(store) -> None:
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    plane = ControlPlane(store, config=config(levers=frozenset({Lever.memory, Lever.rollback})), router=router)
    plane.register_suite(AGENT, ReplaySuite(ScriptedRunner(), tasks(24, "hold"), tasks(6, "probe", probe=True)))
    plane.bootstrap(base_harness())
    live_batch(plane, router, 0)
    decision = plane.journal.decision(plane.tick().decisions[0])
    assert isinstance(decision.predicted["effect"], float) and decision.predicted["effect"] > 0
    assert {"gap", "p_success", "closure", "cost", "score"} <= set(decision.predicted)
    live_batch(plane, router, 1)
    plane.tick()
    live_batch(plane, router, 2)
    plane.tick()
    judged = plane.journal.decision(decision.id)
    assert judged.verdict is not None
    assert judged.verdict_detail["predicted_effect"] == decision.predicted["effect"]
    assert isinstance(judged.verdict_detail["measured_effect"], float)
    assert plane.status(AGENT)[AGENT]["calibration"]["effects_measured"] == 1


def test_decisions_cli_prints_the_calibration(tmp_path) -> None:
    from typer.testing import CliRunner

    from evolvable.cli.main import app
    from evolvable.store import Store

    url = f"sqlite:///{tmp_path / 'cal.db'}"
    with Store.open(url) as store:
        plane = ControlPlane(store)
        d = plane.journal.record_decision(
            AGENT, Lever.memory, predicted={"improve": ["refund"], "effect": 0.1, "gap": 0.3, "p_success": 0.5}
        )
        detail = {"measured_on": "live", "measured_effect": 0.25}
        plane.journal.update_decision(
            d.id, state=DecisionState.promoted, verdict=Verdict.effective, verdict_detail=detail
        )
    out = CliRunner().invoke(app, ["decisions", "--db", url])
    assert out.exit_code == 0, out.output
    assert "+0.100" in out.output and "+0.250" in out.output  # the table cell (wrapped in a narrow terminal)
    assert "predicted success 50% vs observed 100%" in out.output and "MAE 0.150" in out.output
