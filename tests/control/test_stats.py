"""Statistics: intervals and tests on hand-computed cases; per-cluster summaries of recorded runs."""

from __future__ import annotations

import pytest
from tests.control.conftest import AGENT, make_trajectory

from evolvable.control.statistics import compute_statistics, load_runs, summarize
from evolvable.control.stats_math import (
    js_divergence,
    paired_improvement_pvalue,
    wilson_interval,
    worse_pvalue,
)


def test_wilson_interval_matches_hand_computation() -> None:
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-3) and hi == pytest.approx(0.9433, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_paired_test_needs_discordant_evidence_not_a_raw_mean() -> None:
    # Candidate better on 3 tasks, worse on 1: raw mean +2 tasks, but P(X>=3 | n=4) = 5/16.
    cand = [True, True, True, False, True, True]
    base = [False, False, False, True, True, True]
    assert paired_improvement_pvalue(cand, base) == pytest.approx(5 / 16)
    # Five wins and no losses: 1/32 < 0.05.
    assert paired_improvement_pvalue([True] * 5 + [False], [False] * 6) == pytest.approx(1 / 32)
    assert paired_improvement_pvalue([True, False], [True, False]) == 1.0


def test_fisher_worse_and_divergence() -> None:
    assert worse_pvalue(1, 10, 9, 10) < 0.01
    assert worse_pvalue(9, 10, 1, 10) > 0.99
    assert js_divergence({"a": 1}, {"a": 5}) == 0.0
    assert js_divergence({"a": 1}, {"b": 1}) == pytest.approx(1.0)


def test_summaries_read_failure_modes_from_signals_and_tool_steps(sqlite_store) -> None:
    t = make_trajectory(
        cluster="refund",
        success=False,
        harness_version="h1-x",
        tool_error="InvalidArguments",
        label="bad_arguments",
        violation=True,
    )
    run = summarize(t)
    assert run.success is False and run.reward == 0.0 and run.cluster == "refund"
    assert "bad_arguments" in run.failure_labels and run.violations == ["safety_violation"]
    assert run.tool_errors == ["lookup_order:InvalidArguments"]
    assert run.argument_errors and run.argument_errors[0][0] == "lookup_order"
    for i in range(10):
        sqlite_store.put_trajectory(
            make_trajectory(
                cluster="refund", success=i < 3, harness_version="h1-x", label=None if i < 3 else "wrong_tool"
            )
        )
        sqlite_store.put_trajectory(make_trajectory(cluster="order_status", success=True, harness_version="h1-x"))
    runs = load_runs(sqlite_store, AGENT, limit=15)
    assert len(runs) == 15  # the window holds the newest 15
    stats = compute_statistics(AGENT, load_runs(sqlite_store, AGENT))
    refund = stats.clusters["refund"]
    assert (refund.n, refund.successes) == (10, 3)
    assert refund.success_ci[0] < 0.3 < refund.success_ci[1]
    assert refund.failure_labels == {"wrong_tool": 7}
    assert stats.clusters["order_status"].success_rate == 1.0
    assert stats.successful_runs == {"order_status": 10, "refund": 3}
    assert stats.since_weight_update["runs"] == 20
    assert stats.to_dict()["overall"]["n"] == 20


def test_cluster_falls_back_to_the_clusterer() -> None:
    class ByWord:
        def predict(self, text: str) -> str:
            return "refund" if "refund" in text else "other"

    t = make_trajectory(cluster="x", success=True, harness_version=None, task_text="please refund me")
    t.metadata = {}
    assert summarize(t, clusterer=ByWord()).cluster == "refund"


def test_public_names_import() -> None:
    import evolvable.control as control

    assert all(hasattr(control, name) for name in control.__all__)


def test_unmet_verifier_checks_become_failure_labels() -> None:
    from evolvable.control.evolvers.reflective import _hint, _hints
    from evolvable.protocol.models import Signal, SignalKind

    t = make_trajectory(cluster="refund", success=False, harness_version=None)
    t.signals = [
        Signal(kind=SignalKind.outcome, value=0.0, metadata={"failed": ["refunded_order", "safety"], "checks": {}})
    ]
    assert summarize(t).failure_labels == ["unmet:refunded_order"]
    assert _hint("unmet:refunded_order") == "The task is only done when this holds: refunded order."
    assert _hints({"unmet:refunded_order": 2, "unmet:replied": 1, "wrong_tool": 1}) == [
        "The task is only done when: refunded order, replied.",
        "Pick the tool that matches the request before replying.",
    ]
