"""A lever whose work runs in the background (the weights lever's training job) records each tick's
decision as `unavailable` with `pending: true`; such a decision must not cool the lever down, or the job's
outcome would never be picked up while the weights lever is the only one allowed."""

from __future__ import annotations

from tests.control.test_decision import CFG, ctx, group, past, stats

from evolvable.control.decision import DecisionConfig, decide
from evolvable.control.models import DecisionState, Lever

ONLY_WEIGHTS = DecisionConfig(**{**CFG.__dict__, "levers": frozenset({Lever.weights}), "cooldown": 4})
TRAFFIC = stats({"a": group(30, 10), "b": group(30, 10)}, since_runs=60, variance=0.2)


def test_a_pending_job_does_not_cool_the_weights_lever() -> None:
    proposal, _ = decide(ctx(TRAFFIC), ONLY_WEIGHTS)
    assert proposal is not None and proposal.lever == Lever.weights
    pending = past(Lever.weights, DecisionState.unavailable, proposal.target_key)
    pending.gates = {"evolver": "weights: training job job-1 running, step 2", "pending": True}
    again, _ = decide(ctx(TRAFFIC, recent=[pending]), ONLY_WEIGHTS)
    assert again is not None and again.lever == Lever.weights


def test_an_unavailable_lever_still_cools_down() -> None:
    proposal, _ = decide(ctx(TRAFFIC), ONLY_WEIGHTS)
    assert proposal is not None
    failed = past(Lever.weights, DecisionState.unavailable, proposal.target_key)
    failed.gates = {"evolver": "weights: training job job-1 failed: out of memory"}
    cooled, trace = decide(ctx(TRAFFIC, recent=[failed]), ONLY_WEIGHTS)
    assert cooled is None and any("cooldown" in line for line in trace), trace
