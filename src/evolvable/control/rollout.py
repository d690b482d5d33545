"""Canary analysis, as in Argo Rollouts: an analysis run ends Successful, Failed or Inconclusive,
and the rollout promotes, aborts (automatic rollback) or extends and finally pauses for a human.

Live outcomes of the candidate's sessions are compared with the active version's sessions over
the same period. Failed: any safety violation the baseline does not show at the same rate, or a
success rate lower by a one-sided Fisher exact test. Successful: enough candidate runs and no
loss beyond a tolerance. Everything else is Inconclusive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evolvable.control.models import AnalysisResult
from evolvable.control.statistics import RunSummary
from evolvable.control.stats_math import wilson_interval, worse_pvalue


@dataclass
class CanaryConfig:
    share: float = 0.5
    """Share of new sessions that run the candidate."""
    min_runs: int = 10
    """Candidate runs needed before a Successful verdict."""
    alpha: float = 0.05
    tolerance: float = 0.05
    """Successful allows the candidate to trail the baseline by at most this much."""
    max_extensions: int = 2
    """Inconclusive analyses extend the canary this many times, then pause it."""
    max_violation_rate_increase: float = 0.0


def analyze_canary(
    candidate: Sequence[RunSummary], baseline: Sequence[RunSummary], cfg: CanaryConfig
) -> tuple[AnalysisResult, dict[str, Any]]:
    cand = [r for r in candidate if r.success is not None]
    base = [r for r in baseline if r.success is not None]
    cs, bs = sum(1 for r in cand if r.success), sum(1 for r in base if r.success)
    cv, bv = sum(1 for r in cand if r.violations), sum(1 for r in base if r.violations)
    c_rate = cs / len(cand) if cand else 0.0
    b_rate = bs / len(base) if base else 0.0
    c_viol = cv / len(cand) if cand else 0.0
    b_viol = bv / len(base) if base else 0.0
    p_worse = worse_pvalue(cs, len(cand), bs, len(base))
    detail: dict[str, Any] = {
        "candidate": {
            "n": len(cand),
            "successes": cs,
            "rate": c_rate,
            "ci": wilson_interval(cs, len(cand)),
            "violations": cv,
        },
        "baseline": {
            "n": len(base),
            "successes": bs,
            "rate": b_rate,
            "ci": wilson_interval(bs, len(base)),
            "violations": bv,
        },
        "p_worse": p_worse,
    }
    if cv and c_viol > b_viol + cfg.max_violation_rate_increase:
        detail["reason"] = f"safety: {cv} candidate run(s) with violations ({c_viol:.0%} vs {b_viol:.0%})"
        return AnalysisResult.failed, detail
    if cand and base and p_worse < cfg.alpha:
        detail["reason"] = f"success {c_rate:.0%} vs {b_rate:.0%}, one-sided Fisher p={p_worse:.3f}"
        return AnalysisResult.failed, detail
    if len(cand) >= cfg.min_runs and (not base or c_rate >= b_rate - cfg.tolerance):
        detail["reason"] = f"success {c_rate:.0%} (n={len(cand)}) vs {b_rate:.0%} (n={len(base)}), no violations added"
        return AnalysisResult.successful, detail
    detail["reason"] = f"not enough evidence yet: {len(cand)} candidate / {len(base)} baseline runs"
    return AnalysisResult.inconclusive, detail
