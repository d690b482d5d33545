"""Lever choice from evidence: rank applicable levers by expected gain per cost, and score the predictions.

Each rule in `decision.py` says whether its lever applies. Among the levers that do, the choice is
not a fixed cascade: each gets

    gap     = sum over the clusters it targets of (traffic share x distance to the target success rate)
    p       = chance the lever works here: a Beta posterior over this agent's past verdicts of the lever
              on overlapping clusters (effective 1, partially effective 1/2, ineffective, harmful or
              stopped by a gate 0), starting from a per-lever prior worth two decisions
    closure = share of the gap a working edit closes: the mean closure measured on past verdicts of
              the lever, else the lever's prior
    effect  = p x closure x gap            (predicted change in the agent's overall success rate)
    score   = effect / cost                (cost: compute and blast radius, memory cheapest, weights dearest)

The decision record carries `effect` (and its parts); the verdict later records the measured change,
and `calibration` compares the two across decisions (`evolvable decisions` prints it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from evolvable.control.models import Decision, DecisionState, Lever, Verdict
from evolvable.control.statistics import AgentStatistics


@dataclass(frozen=True)
class LeverPrior:
    p_success: float
    closure: float
    cost: float


PRIORS: dict[Lever, LeverPrior] = {
    Lever.memory: LeverPrior(0.5, 0.5, 1.0),
    Lever.tool: LeverPrior(0.4, 0.3, 1.0),
    Lever.skill: LeverPrior(0.35, 0.4, 1.5),
    Lever.prompt: LeverPrior(0.3, 0.3, 2.0),
    Lever.weights: LeverPrior(0.3, 0.4, 8.0),
    Lever.rollback: LeverPrior(0.8, 1.0, 0.5),
}
PRIOR_STRENGTH = 2.0
WIN = {Verdict.effective: 1.0, Verdict.partially_effective: 0.5, Verdict.ineffective: 0.0, Verdict.harmful: 0.0}
STOPPED = frozenset({DecisionState.gated_out, DecisionState.failed, DecisionState.rolled_back})


@dataclass
class Expectation:
    lever: str
    gap: float
    p_success: float
    closure: float
    effect: float
    cost: float
    score: float
    history: int
    """Past decisions of this lever on overlapping clusters that the estimate learned from."""

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def gap_of(stats: AgentStatistics, clusters: Sequence[str], target_success: float) -> float:
    """Traffic-weighted distance of the clusters to the target success rate (0..1 of overall success)."""
    total = sum(g.n for g in stats.clusters.values())
    if total == 0:
        return 0.0
    return sum(
        stats.clusters[c].n / total * max(0.0, target_success - stats.clusters[c].success_rate)
        for c in clusters
        if c in stats.clusters
    )


def outcome_of(decision: Decision) -> float | None:
    """1 worked, 0.5 partly, 0 did not (including stopped by a gate); None while undecided."""
    if decision.verdict is not None:
        return WIN[decision.verdict]
    if decision.state in STOPPED:
        return 0.0
    return None


def _relevant(history: Sequence[Decision], lever: Lever, clusters: Sequence[str]) -> list[Decision]:
    wanted = set(clusters)
    return [
        d
        for d in history
        if d.lever == lever
        and outcome_of(d) is not None
        and (not wanted or not d.predicted.get("improve") or wanted & set(d.predicted.get("improve", [])))
    ]


def expect(
    lever: Lever, clusters: Sequence[str], stats: AgentStatistics, history: Sequence[Decision], target: float
) -> Expectation:
    prior = PRIORS[lever]
    past = _relevant(history, lever, clusters)
    wins = sum(outcome_of(d) or 0.0 for d in past)
    p = (PRIOR_STRENGTH * prior.p_success + wins) / (PRIOR_STRENGTH + len(past))
    closures = [
        d.verdict_detail["measured_effect"] / d.predicted["gap"]
        for d in past
        if d.verdict in (Verdict.effective, Verdict.partially_effective)
        and d.verdict_detail
        and isinstance(d.verdict_detail.get("measured_effect"), float | int)
        and d.predicted.get("gap")
    ]
    closure = min(1.0, max(0.0, sum(closures) / len(closures))) if closures else prior.closure
    gap = gap_of(stats, clusters, target)
    effect = p * closure * gap
    return Expectation(lever.value, gap, p, closure, effect, prior.cost, effect / prior.cost, len(past))


def calibration(decisions: Sequence[Decision]) -> dict[str, Any]:
    """Predicted vs measured effect, and predicted chance of success vs what happened, over decided decisions."""
    pairs = [
        (float(d.predicted["effect"]), float(d.verdict_detail["measured_effect"]))
        for d in decisions
        if isinstance(d.predicted.get("effect"), float | int)
        and d.verdict_detail
        and isinstance(d.verdict_detail.get("measured_effect"), float | int)
        and d.verdict_detail.get("measured_on") == "live"
    ]
    chances = [
        (float(d.predicted["p_success"]), outcome_of(d))
        for d in decisions
        if isinstance(d.predicted.get("p_success"), float | int) and outcome_of(d) is not None
    ]
    out: dict[str, Any] = {"effects_measured": len(pairs), "outcomes": len(chances)}
    if pairs:
        out["mean_predicted_effect"] = round(sum(p for p, _ in pairs) / len(pairs), 4)
        out["mean_measured_effect"] = round(sum(m for _, m in pairs) / len(pairs), 4)
        out["effect_mae"] = round(sum(abs(p - m) for p, m in pairs) / len(pairs), 4)
    if chances:
        out["brier"] = round(sum((p - (o or 0.0)) ** 2 for p, o in chances) / len(chances), 4)
        out["predicted_success"] = round(sum(p for p, _ in chances) / len(chances), 3)
        out["observed_success"] = round(sum(o or 0.0 for _, o in chances) / len(chances), 3)
    return out
