"""A Pareto front of harness versions across clusters (GEPA's candidate pool).

GEPA keeps every candidate that is best on at least one task instance and mutates from that front,
instead of only from the single best-on-average candidate: an edit that helped one cluster is not
lost because another version does better overall. Here the instances are clusters and the scores
are live success rates per harness version (replays are excluded from the runs). A reflective
mutation for a cluster starts from the component of the version that does best on that cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Rates = dict[str, dict[str, tuple[int, int]]]
"""harness version -> cluster -> (successes, runs)."""


def cluster_rates(runs: Sequence[Any], min_runs: int = 3) -> Rates:
    """Per version and cluster, (successes, runs) over runs with a known success; thin cells dropped."""
    out: Rates = {}
    for r in runs:
        if r.harness_version is None or r.success is None:
            continue
        s, n = out.setdefault(r.harness_version, {}).get(r.cluster, (0, 0))
        out[r.harness_version][r.cluster] = (s + bool(r.success), n + 1)
    return {v: {c: sn for c, sn in cells.items() if sn[1] >= min_runs} for v, cells in out.items()}


def _rate(cell: tuple[int, int]) -> float:
    return cell[0] / cell[1]


def pareto_front(rates: Rates) -> dict[str, list[str]]:
    """Versions best (ties included) on at least one cluster, with those clusters; dominated ones dropped."""
    clusters = sorted({c for cells in rates.values() for c in cells})
    best_on: dict[str, list[str]] = {}
    for c in clusters:
        scored = {v: _rate(cells[c]) for v, cells in rates.items() if c in cells}
        top = max(scored.values())
        for v, score in scored.items():
            if score == top:
                best_on.setdefault(v, []).append(c)

    def dominated(v: str) -> bool:
        mine = rates[v]
        for other, theirs in rates.items():
            shared = [c for c in mine if c in theirs]
            if other == v or not shared or len(shared) < len(mine):
                continue
            if all(_rate(theirs[c]) >= _rate(mine[c]) for c in shared) and any(
                _rate(theirs[c]) > _rate(mine[c]) for c in shared
            ):
                return True
        return False

    return {v: cs for v, cs in best_on.items() if not dominated(v)}


def parent_for(front: dict[str, list[str]], rates: Rates, cluster: str | None, active: str) -> str:
    """The front version to mutate from: best on `cluster` (or on the most clusters); the active one on ties."""
    if cluster is not None:
        on = [v for v, cs in front.items() if cluster in cs]
        if not on or active in on:
            return active
        return max(on, key=lambda v: (rates[v][cluster][1], v))
    if not front:
        return active
    widest = max(len(cs) for cs in front.values())
    on = [v for v, cs in front.items() if len(cs) == widest]
    return active if active in on else sorted(on)[0]
