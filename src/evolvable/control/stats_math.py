"""The statistics the control plane relies on, in one place: intervals and significance tests.

Pure functions over counts and arrays (numpy/scipy), unit-tested on hand-computed cases.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (good at small n and near 0 or 1)."""
    if n == 0:
        return (0.0, 1.0)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (float(max(0.0, centre - half)), float(min(1.0, centre + half)))


def bootstrap_mean_interval(
    values: Sequence[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (rewards are not binomial)."""
    if len(values) == 0:
        return (float("nan"), float("nan"))
    if len(values) == 1:
        return (float(values[0]), float(values[0]))
    rng = np.random.default_rng(seed)
    arr = np.asarray(values, dtype=float)
    means = arr[rng.integers(0, len(arr), size=(resamples, len(arr)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - confidence) / 2, 1 - (1 - confidence) / 2])
    return (float(lo), float(hi))


def paired_improvement_pvalue(candidate: Sequence[bool], baseline: Sequence[bool]) -> float:
    """One-sided exact McNemar test on paired per-task outcomes: P(candidate is not better).

    Only discordant pairs carry information: b = tasks the candidate alone solves, c = tasks only the
    baseline solves. Under H0 (no difference) b ~ Binomial(b + c, 1/2); we return P(X >= b).
    """
    if len(candidate) != len(baseline):
        raise ValueError("paired test needs outcomes for the same tasks")
    b = sum(1 for x, y in zip(candidate, baseline, strict=True) if x and not y)
    c = sum(1 for x, y in zip(candidate, baseline, strict=True) if y and not x)
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(b, b + c, 0.5, alternative="greater").pvalue)


def worse_pvalue(candidate_successes: int, candidate_n: int, baseline_successes: int, baseline_n: int) -> float:
    """One-sided Fisher exact test: P-value for 'the candidate's success rate is lower than the baseline's'."""
    if candidate_n == 0 or baseline_n == 0:
        return 1.0
    table = [
        [candidate_successes, candidate_n - candidate_successes],
        [baseline_successes, baseline_n - baseline_successes],
    ]
    return float(stats.fisher_exact(table, alternative="less").pvalue)


def better_pvalue(candidate_successes: int, candidate_n: int, baseline_successes: int, baseline_n: int) -> float:
    """One-sided Fisher exact test for 'the candidate's success rate is higher' (unpaired live data)."""
    if candidate_n == 0 or baseline_n == 0:
        return 1.0
    table = [
        [candidate_successes, candidate_n - candidate_successes],
        [baseline_successes, baseline_n - baseline_successes],
    ]
    return float(stats.fisher_exact(table, alternative="greater").pvalue)


def trend_slope(successes: Sequence[bool]) -> float:
    """Least-squares slope of success over position in the window (per 100 runs); 0 when too few."""
    if len(successes) < 4:
        return 0.0
    y = np.asarray(successes, dtype=float)
    x = np.arange(len(y), dtype=float)
    slope = np.polyfit(x, y, 1)[0]
    return float(slope * 100)


def js_divergence(p: dict[str, float], q: dict[str, float]) -> float:
    """Jensen-Shannon divergence (base 2, in [0, 1]) between two categorical distributions."""
    keys = sorted(set(p) | set(q))
    if not keys:
        return 0.0
    a = np.asarray([p.get(k, 0.0) for k in keys], dtype=float)
    b = np.asarray([q.get(k, 0.0) for k in keys], dtype=float)
    if a.sum() == 0 or b.sum() == 0:
        return 0.0
    a, b = a / a.sum(), b / b.sum()
    m = (a + b) / 2

    def kl(x: np.ndarray, y: np.ndarray) -> float:
        mask = x > 0
        return float(np.sum(x[mask] * np.log2(x[mask] / y[mask])))

    return (kl(a, m) + kl(b, m)) / 2
