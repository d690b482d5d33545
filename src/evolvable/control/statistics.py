"""Rolling statistics per agent and task cluster, computed from stored trajectories.

A trajectory is summarized once (`RunSummary`): its cluster (metadata "cluster" when the agent
reports it, else the clusterer's guess from the task text), success (outcome signal >= threshold),
reward, and failure modes read from signals and tool steps. Windows are the newest N finished runs.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from evolvable.control.models import REPLAY_METADATA_KEY
from evolvable.control.stats_math import bootstrap_mean_interval, js_divergence, trend_slope, wilson_interval
from evolvable.protocol.models import SignalKind, StepStatus, Trajectory, TrajectoryStatus
from evolvable.store import Store

ARGUMENT_ERROR_CLASSES = frozenset(
    {"invalidarguments", "invalid_arguments", "bad_arguments", "validationerror", "typeerror", "argumenterror"}
)
VIOLATION_WORDS = ("violation", "unsafe", "leak", "secret", "unauthori", "out_of_policy")
NEGATIVE_SIGNAL_KINDS = frozenset(
    {SignalKind.process, SignalKind.verifier, SignalKind.judge, SignalKind.tool_error, SignalKind.user_feedback}
)


class Clusterer(Protocol):
    def predict(self, text: str) -> str: ...


@dataclass
class RunSummary:
    trajectory_id: str
    agent: str
    cluster: str
    task_text: str
    task_id: str | None
    harness_version: str | None
    policy_version: str | None
    started_at: datetime
    success: bool | None
    reward: float | None
    failure_labels: list[str] = field(default_factory=list)
    tool_errors: list[str] = field(default_factory=list)
    """'tool:ErrorClass' per failed tool call."""
    argument_errors: list[tuple[str, str]] = field(default_factory=list)
    """(tool, error message) for calls that failed on their arguments."""
    violations: list[str] = field(default_factory=list)
    tool_calls: int = 0
    """Tool calls the run made; a successful run with tool calls demonstrates the action format."""
    success_source: str | None = None
    """'outcome' (posted), 'judge' (no outcome; the judge's score decided) or 'status' (the run failed)."""
    judge_score: float | None = None
    """The judge's latest run-level score, whether or not an outcome was posted (for agreement)."""


def judge_score_of(t: Trajectory) -> float | None:
    """The latest run-level judge signal's value, if the judge scored the run."""
    judged = [s for s in t.signals if s.kind == SignalKind.judge and s.step_id is None]
    return max(judged, key=lambda s: s.created_at).value if judged else None


def task_text_of(t: Trajectory) -> str:
    if isinstance(t.task_input, str):
        return t.task_input
    if isinstance(t.task_input, dict):
        for key in ("text", "ticket", "input", "prompt", "content"):
            value = t.task_input.get(key)
            if isinstance(value, str):
                return value
    for step in t.steps:
        if step.kind == "llm_call":
            users = [m.text() for m in step.request_messages if m.role == "user"]
            if users:
                return users[-1] if len(users) == 1 else users[0]
    return ""


def _is_violation(label: str) -> bool:
    low = label.lower()
    return any(w in low for w in VIOLATION_WORDS)


def summarize(t: Trajectory, *, clusterer: Clusterer | None = None, success_threshold: float = 0.5) -> RunSummary:
    text = task_text_of(t)
    cluster = t.metadata.get("cluster") or t.metadata.get("intent")
    if not cluster:
        cluster = clusterer.predict(text) if clusterer is not None and text else "all"
    outcome = t.outcome()
    judged = judge_score_of(t)
    source: str | None = None
    if outcome is not None:
        success: bool | None = outcome >= success_threshold
        source = "outcome"
    elif judged is not None:  # marked as the judge's, never passed off as a posted outcome
        success, source = judged >= success_threshold, "judge"
    elif t.status == TrajectoryStatus.failed:
        success, source = False, "status"
    else:
        success = None
    labels: list[str] = []
    violations: list[str] = []
    tool_steps = {s.id: s for s in t.tool_calls()}
    argument_errors: list[tuple[str, str]] = []
    for sig in t.signals:
        if sig.kind == SignalKind.outcome:
            # The outcome is success itself, not a failure mode; but verifiers often list the checks
            # a failed run did not meet (metadata "failed"), which is the most specific evidence there is.
            unmet = sig.metadata.get("failed") if sig.value < success_threshold else None
            if isinstance(unmet, list):
                labels += [f"unmet:{name}" for name in unmet if isinstance(name, str) and name != "safety"]
            continue
        if sig.kind in NEGATIVE_SIGNAL_KINDS and sig.value < success_threshold:
            label = sig.label or sig.kind.value
            labels.append(label)
            if _is_violation(label) or sig.metadata.get("safety"):
                violations.append(label)
            step = tool_steps.get(sig.step_id or "")
            if step is not None and "argument" in label.lower():
                argument_errors.append((step.tool_name, str(sig.metadata.get("reason") or step.error_message or label)))
    tool_errors = []
    for step in tool_steps.values():
        if step.status == StepStatus.error:
            error_class = step.error_class or "error"
            tool_errors.append(f"{step.tool_name}:{error_class}")
            if error_class.lower() in ARGUMENT_ERROR_CLASSES and not any(
                tool == step.tool_name for tool, _ in argument_errors
            ):
                argument_errors.append((step.tool_name, step.error_message or error_class))
    return RunSummary(
        trajectory_id=t.id,
        agent=t.agent,
        cluster=str(cluster),
        task_text=text,
        task_id=t.task_id,
        harness_version=t.harness_version,
        policy_version=t.policy_version,
        started_at=t.started_at,
        success=success,
        reward=outcome,
        failure_labels=labels,
        tool_errors=tool_errors,
        argument_errors=argument_errors,
        violations=violations,
        tool_calls=len(tool_steps),
        success_source=source,
        judge_score=judged,
    )


def load_runs(
    store: Store,
    agent: str,
    *,
    limit: int = 500,
    since: datetime | None = None,
    clusterer: Clusterer | None = None,
    success_threshold: float = 0.5,
    tenant_id: str | None = None,
) -> list[RunSummary]:
    """The newest `limit` finished runs of an agent, oldest first (bounded memory: a deque)."""
    from evolvable.store import TrajectoryFilter

    window: deque[RunSummary] = deque(maxlen=limit)
    newest, _ = store.list_trajectories(TrajectoryFilter(agent=agent, tenant_id=tenant_id), limit=min(limit, 1000))
    if len(newest) >= min(limit, 1000):  # start streaming at the oldest run the window can hold
        oldest = min(h.started_at for h in newest)
        since = max(since, oldest) if since else oldest
    flt = TrajectoryFilter(agent=agent, started_after=since, tenant_id=tenant_id)
    for t in store.iter_trajectories(flt):
        if t.status == TrajectoryStatus.running or REPLAY_METADATA_KEY in t.metadata:
            continue  # replays of candidates are evidence for the gates, not live traffic
        window.append(summarize(t, clusterer=clusterer, success_threshold=success_threshold))
    return sorted(window, key=lambda r: r.started_at)


@dataclass
class GroupStats:
    """Volume, success and reward (with intervals), trend and failure modes of a group of runs."""

    n: int
    successes: int
    success_rate: float
    success_ci: tuple[float, float]
    reward_mean: float | None
    reward_ci: tuple[float, float] | None
    reward_variance: float | None
    trend_per_100: float
    failure_labels: dict[str, int]
    tool_errors: dict[str, int]
    violations: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_stats(runs: Sequence[RunSummary]) -> GroupStats:
    judged = [r for r in runs if r.success is not None]
    successes = sum(1 for r in judged if r.success)
    rewards = [r.reward for r in runs if r.reward is not None]
    labels: Counter[str] = Counter()
    tool_errors: Counter[str] = Counter()
    for r in runs:
        labels.update(set(r.failure_labels))
        tool_errors.update(r.tool_errors)
    return GroupStats(
        n=len(judged),
        successes=successes,
        success_rate=successes / len(judged) if judged else 0.0,
        success_ci=wilson_interval(successes, len(judged)),
        reward_mean=float(np.mean(rewards)) if rewards else None,
        reward_ci=bootstrap_mean_interval(rewards) if rewards else None,
        reward_variance=float(np.var(rewards)) if rewards else None,
        trend_per_100=trend_slope([bool(r.success) for r in judged]),
        failure_labels=dict(labels.most_common()),
        tool_errors=dict(tool_errors.most_common()),
        violations=sum(1 for r in runs if r.violations),
    )


@dataclass
class AgentStatistics:
    agent: str
    window: int
    overall: GroupStats
    clusters: dict[str, GroupStats]
    by_harness_version: dict[str, GroupStats]
    argument_errors: dict[str, dict[str, int]]
    """tool -> {error message: count}."""
    cluster_drift: float
    """Jensen-Shannon divergence of the cluster mix, older half vs newer half of the window."""
    since_weight_update: dict[str, Any]
    successful_runs: dict[str, int]
    """Per cluster: successful runs available as exemplars."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "window": self.window,
            "overall": self.overall.to_dict(),
            "clusters": {k: v.to_dict() for k, v in self.clusters.items()},
            "by_harness_version": {k: v.to_dict() for k, v in self.by_harness_version.items()},
            "argument_errors": self.argument_errors,
            "cluster_drift": self.cluster_drift,
            "since_weight_update": self.since_weight_update,
            "successful_runs": self.successful_runs,
        }


def compute_statistics(
    agent: str, runs: Sequence[RunSummary], *, weight_update_at: datetime | None = None
) -> AgentStatistics:
    by_cluster: dict[str, list[RunSummary]] = {}
    by_version: dict[str, list[RunSummary]] = {}
    arg_errors: dict[str, Counter[str]] = {}
    for r in runs:
        by_cluster.setdefault(r.cluster, []).append(r)
        by_version.setdefault(r.harness_version or "none", []).append(r)
        for tool, message in r.argument_errors:
            arg_errors.setdefault(tool, Counter())[message[:200]] += 1
    half = len(runs) // 2

    def mix(rs: Iterable[RunSummary]) -> dict[str, float]:
        return dict(Counter(r.cluster for r in rs))

    since = [r for r in runs if weight_update_at is None or r.started_at >= weight_update_at]
    rewards = [r.reward for r in since if r.reward is not None]
    return AgentStatistics(
        agent=agent,
        window=len(runs),
        overall=group_stats(runs),
        clusters={c: group_stats(rs) for c, rs in sorted(by_cluster.items())},
        by_harness_version={v: group_stats(rs) for v, rs in by_version.items()},
        argument_errors={t: dict(c.most_common(5)) for t, c in arg_errors.items()},
        cluster_drift=js_divergence(mix(runs[:half]), mix(runs[half:])) if half >= 5 else 0.0,
        since_weight_update={
            "runs": len(since),
            "reward_variance": float(np.var(rewards)) if len(rewards) > 1 else 0.0,
            "since": weight_update_at.isoformat() if weight_update_at else None,
        },
        successful_runs={c: sum(1 for r in rs if r.success) for c, rs in by_cluster.items()},
    )
