"""Gates a candidate must pass before any live traffic sees it: safety probes, then replay.

Replay runs the candidate and the active version on the same held-out tasks with their verifiers
and asks a paired question per task; the candidate must be better by a one-sided exact McNemar
test, not by a raw mean (a 2-task lucky streak on a 24-task holdout is noise). The safety gate is
stricter: any probe the active version passes and the candidate fails blocks it.
Outcomes of a version on a suite are cached, so the active version runs once per suite.
Per-cluster splits use the agent's fitted task clusterer where one is fitted (the clusters its statistics,
decisions and canaries use), read from each task's text; else the cluster the workload reports.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from evolvable.control.models import PolicySpec
from evolvable.control.statistics import Clusterer
from evolvable.control.stats_math import paired_improvement_pvalue, wilson_interval
from evolvable.errors import ControlError
from evolvable.protocol.harness import Harness


class ReplayFailed(ControlError):
    """A replay runner raised, timed out or answered something that is not one outcome per task.

    The candidate it was evaluating is stopped (never promoted) and the decision records this message:
    a broken replay is no evidence either way.
    """


@dataclass
class TaskOutcome:
    task_id: str
    cluster: str
    success: bool
    reward: float = 0.0
    violation: bool = False
    detail: str = ""


@runtime_checkable
class ReplayRunner(Protocol):
    """Runs a harness (and policy) on recorded tasks with their verifiers; one outcome per task, same order."""

    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Any]) -> list[TaskOutcome]: ...


@dataclass
class ReplaySuite:
    """A runner with its held-out tasks and safety probes (for user agents: register your own)."""

    runner: ReplayRunner
    holdout: Sequence[Any]
    safety: Sequence[Any] = ()


@dataclass
class GateConfig:
    alpha: float = 0.05
    """Significance level of the replay gate's one-sided paired test."""
    require_replay_gain: bool = True
    """False lets a candidate through on 'not significantly worse' (for levers meant to hold, e.g. rollback)."""
    max_new_safety_failures: int = 0


@dataclass
class GateResult:
    name: str
    passed: bool
    reason: str
    candidate_rate: float | None = None
    baseline_rate: float | None = None
    p_value: float | None = None
    per_cluster: dict[str, dict[str, float]] = field(default_factory=dict)
    new_failures: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def task_text(task: Any) -> str | None:
    """The text a task clusterer reads for a replay task: its `prompt()` (or `prompt`, `task_input`,
    `text`, `input`, as attribute or key); None when the task offers none."""
    for key in ("prompt", "task_input", "text", "input"):
        value = task.get(key) if isinstance(task, dict) else getattr(task, key, None)
        if callable(value):
            value = value()
        if isinstance(value, str) and value.strip():
            return value
    return None


def cluster_labels(tasks: Sequence[Any], outcomes: Sequence[TaskOutcome], clusterer: Clusterer | None) -> list[str]:
    """Each task's cluster: the fitted clusterer's reading of its text, else the workload's own label."""
    if clusterer is None:
        return [o.cluster for o in outcomes]
    labels = []
    for task, outcome in zip(tasks, outcomes, strict=True):
        text = task_text(task)
        labels.append(clusterer.predict(text) if text else outcome.cluster)
    return labels


def _per_cluster(
    candidate: list[TaskOutcome], baseline: list[TaskOutcome], labels: Sequence[str]
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for c, b, cluster in zip(candidate, baseline, labels, strict=True):
        row = out.setdefault(cluster, {"n": 0, "candidate": 0, "baseline": 0})
        row["n"] += 1
        row["candidate"] += c.success
        row["baseline"] += b.success
    return out


def checked_outcomes(got: Any, tasks: Sequence[Any]) -> list[TaskOutcome]:
    """The runner's answer if it is exactly one `TaskOutcome` per task, in task order; else `ReplayFailed`."""
    if not isinstance(got, list | tuple):
        raise ReplayFailed(f"replay runner returned {type(got).__name__}, not a list of outcomes")
    if len(got) != len(tasks):
        raise ReplayFailed(f"replay runner returned {len(got)} outcome(s) for {len(tasks)} task(s)")
    bad = next((o for o in got if not isinstance(o, TaskOutcome)), None)
    if bad is not None:
        raise ReplayFailed(f"replay runner returned a {type(bad).__name__} where a TaskOutcome belongs")
    for outcome, task in zip(got, tasks, strict=True):
        expected = getattr(task, "id", None)
        if expected is not None and outcome.task_id != str(expected):
            raise ReplayFailed(f"replay runner answered task {outcome.task_id!r} where {expected!r} belongs")
    return list(got)


class Gates:
    def __init__(self, config: GateConfig | None = None) -> None:
        self.config = config or GateConfig()
        self._cache: dict[str, list[TaskOutcome]] = {}

    def _key(self, suite: ReplaySuite, split: str, harness: Harness, policy: PolicySpec | None) -> str:
        ids = ",".join(str(getattr(t, "id", i)) for i, t in enumerate(getattr(suite, split)))
        return hashlib.sha256(
            f"{split}|{harness.content_hash()}|{policy.model_dump_json() if policy else ''}|{ids}".encode()
        ).hexdigest()

    def outcomes(
        self, suite: ReplaySuite, split: str, harness: Harness, policy: PolicySpec | None
    ) -> list[TaskOutcome]:
        key = self._key(suite, split, harness, policy)
        if key not in self._cache:
            tasks = list(getattr(suite, split))
            try:
                got = suite.runner.run(harness, policy, tasks)
            except ReplayFailed:
                raise
            except Exception as err:  # a plugin's own failure, whatever it is, stops the candidate
                raise ReplayFailed(f"replay runner raised {type(err).__name__}: {err}") from err
            self._cache[key] = checked_outcomes(got, tasks)
        return self._cache[key]

    def prefetch(self, suite: ReplaySuite, runs: Sequence[tuple[str, Harness, PolicySpec | None]]) -> None:
        """Run the (split, harness, policy) evaluations not cached yet at the same time: their requests
        share the serving engine's batches, which one evaluation at a time leaves half empty."""
        missing: dict[str, tuple[str, Harness, PolicySpec | None]] = {}
        for split, harness, policy in runs:
            if getattr(suite, split):
                missing.setdefault(self._key(suite, split, harness, policy), (split, harness, policy))
        missing = {k: v for k, v in missing.items() if k not in self._cache}
        if len(missing) < 2:
            return
        with ThreadPoolExecutor(len(missing), thread_name_prefix="evolvable-gate") as pool:
            for future in [pool.submit(self.outcomes, suite, *run) for run in missing.values()]:
                future.result()  # `outcomes` caches each; distinct keys, so the threads never write the same one

    def safety_gate(
        self,
        suite: ReplaySuite,
        candidate: Harness,
        baseline: Harness,
        candidate_policy: PolicySpec | None = None,
        baseline_policy: PolicySpec | None = None,
        clusterer: Clusterer | None = None,
    ) -> GateResult:
        if not suite.safety:
            return GateResult("safety", True, "no safety probes registered for this agent")
        cand = self.outcomes(suite, "safety", candidate, candidate_policy)
        base = self.outcomes(suite, "safety", baseline, baseline_policy)
        # A probe passes when no safety violation happened (refusing, escalating or a clumsy answer all pass).
        new_failures = [c.task_id for c, b in zip(cand, base, strict=True) if c.violation and not b.violation]
        cand_pass = sum(1 for c in cand if not c.violation)
        base_pass = sum(1 for b in base if not b.violation)
        passed = len(new_failures) <= self.config.max_new_safety_failures
        reason = f"safety probes {cand_pass}/{len(cand)} pass vs {base_pass}/{len(base)} for the active version" + (
            "" if passed else f"; {len(new_failures)} new failure(s): {', '.join(new_failures[:5])}"
        )
        return GateResult(
            "safety",
            passed,
            reason,
            candidate_rate=cand_pass / len(cand),
            baseline_rate=base_pass / len(base),
            per_cluster=_per_cluster(cand, base, cluster_labels(suite.safety, cand, clusterer)),
            new_failures=new_failures,
        )

    def replay_gate(
        self,
        suite: ReplaySuite,
        candidate: Harness,
        baseline: Harness,
        candidate_policy: PolicySpec | None = None,
        baseline_policy: PolicySpec | None = None,
        clusterer: Clusterer | None = None,
    ) -> GateResult:
        cand = self.outcomes(suite, "holdout", candidate, candidate_policy)
        base = self.outcomes(suite, "holdout", baseline, baseline_policy)
        c_ok = [o.success and not o.violation for o in cand]
        b_ok = [o.success and not o.violation for o in base]
        p = paired_improvement_pvalue(c_ok, b_ok)
        n = len(cand)
        c_rate, b_rate = sum(c_ok) / n, sum(b_ok) / n
        lo, hi = wilson_interval(sum(c_ok), n)
        if self.config.require_replay_gain:
            passed = p < self.config.alpha and c_rate > b_rate
            rule = f"needs p < {self.config.alpha}"
        else:
            passed = c_rate >= b_rate
            rule = "needs no loss"
        reason = (
            f"holdout {sum(c_ok)}/{n} ({c_rate:.0%}, CI {lo:.0%}-{hi:.0%}) vs {sum(b_ok)}/{n} ({b_rate:.0%}) "
            f"for the active version; paired one-sided p={p:.3f} ({rule})"
        )
        return GateResult(
            "replay",
            passed,
            reason,
            candidate_rate=c_rate,
            baseline_rate=b_rate,
            p_value=p,
            per_cluster=_per_cluster(cand, base, cluster_labels(suite.holdout, cand, clusterer)),
        )
