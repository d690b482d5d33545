"""The weights lever's gate inside a training round: which snapshot of a job, if any, to publish.

Measured (docs/PERFORMANCE.md, `benchmarks/rl.py`): ungated RL rounds on an agent's own traffic lost
up to 22.9 points on some seeds; gated rounds never served a worse policy. The rule: the served policy
and evenly spaced snapshots of the job (the last step included) run the same validation tasks the job
never trained on. A snapshot passes when it solves more tasks than the served policy and no cluster
loses more than `max_cluster_loss` of its tasks (one cluster improving while another collapses is the
failure this catches); the passing snapshot with most successes wins, the earliest on a tie. None
passing: nothing is published and the served policy stays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evolvable.control.gates import TaskOutcome


@dataclass(frozen=True)
class SnapshotGateConfig:
    points: int = 3
    """How many evenly spaced snapshots (the last step included) run the validation tasks."""
    max_cluster_loss: int = 1
    """A snapshot fails when any cluster solves more than this many fewer tasks than the served policy."""
    min_gain: int = 1
    """A snapshot must solve at least this many more validation tasks than the served policy. 1 is the
    measured rule (strictly better); 0 or less lets an equal or worse snapshot through, which only a test
    that must exercise publish, hot-load and canary with a tiny training budget should configure."""


@dataclass
class SnapshotVerdict:
    tasks: int
    base_solved: int
    base_per_cluster: dict[str, int]
    candidates: dict[int, dict[str, Any]] = field(default_factory=dict)
    """step -> {"solved", "per_cluster", "passed"}."""
    chosen_step: int | None = None

    @property
    def reason(self) -> str:
        if self.chosen_step is not None:
            best = self.candidates[self.chosen_step]
            return f"step {self.chosen_step} solved {best['solved']}/{self.tasks} vs served {self.base_solved}"
        tried = ", ".join(f"step {s}: {c['solved']}" for s, c in sorted(self.candidates.items()))
        return f"no snapshot beat the served policy ({self.base_solved}/{self.tasks}; {tried or 'none tried'})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "base_solved": self.base_solved,
            "base_per_cluster": self.base_per_cluster,
            "candidates": {str(k): v for k, v in self.candidates.items()},
            "chosen_step": self.chosen_step,
            "reason": self.reason,
        }


def gate_steps(snapshot_steps: Iterable[int], last_step: int, points: int) -> list[int]:
    """Evenly spaced steps (k/points of the job, k = 1..points) that have a snapshot, ascending."""
    wanted = {max(1, round(last_step * k / points)) for k in range(1, points + 1)}
    return sorted(wanted & set(snapshot_steps))


def solved_per_cluster(outcomes: Sequence[TaskOutcome]) -> dict[str, int]:
    counts: Counter[str] = Counter({o.cluster: 0 for o in outcomes})
    counts.update(o.cluster for o in outcomes if o.success)
    return dict(counts)


def choose_snapshot(
    base: Sequence[TaskOutcome],
    candidates: Mapping[int, Sequence[TaskOutcome]],
    config: SnapshotGateConfig | None = None,
) -> SnapshotVerdict:
    """Apply the rule to the served policy's outcomes and each snapshot's, on the same tasks."""
    config = config or SnapshotGateConfig()
    base_clusters = solved_per_cluster(base)
    base_solved = sum(base_clusters.values())
    verdict = SnapshotVerdict(tasks=len(base), base_solved=base_solved, base_per_cluster=base_clusters)
    for step, outcomes in sorted(candidates.items()):
        clusters = solved_per_cluster(outcomes)
        solved = sum(clusters.values())
        worst = min((clusters.get(k, 0) - n for k, n in base_clusters.items()), default=0)
        verdict.candidates[step] = {
            "solved": solved,
            "per_cluster": clusters,
            "passed": solved - base_solved >= config.min_gain and worst >= -config.max_cluster_loss,
        }
    passing = [s for s, c in verdict.candidates.items() if c["passed"]]
    if passing:
        verdict.chosen_step = max(passing, key=lambda s: (verdict.candidates[s]["solved"], -s))
    return verdict


def gate_snapshots(
    evaluate: Callable[[str | None], Sequence[TaskOutcome]],
    snapshots: Mapping[int, str],
    last_step: int,
    config: SnapshotGateConfig | None = None,
) -> SnapshotVerdict:
    """Run the gate: `evaluate(None)` scores the served policy, `evaluate(path)` a snapshot's adapter
    (the caller loads it into its server and runs the validation tasks)."""
    config = config or SnapshotGateConfig()
    base = evaluate(None)
    steps = gate_steps(snapshots, last_step, config.points)
    return choose_snapshot(base, {step: evaluate(snapshots[step]) for step in steps}, config)
