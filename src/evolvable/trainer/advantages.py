"""Credit assignment for live traffic, where every task is usually run once.

GRPO-style group normalisation needs several runs of one task; live traffic has one. So:
- the baseline is a running mean (EMA) of the outcome reward per cluster (for the support desk, the
  intent), persisted with the job state so it survives resumes and carries over between jobs;
- when the batch does hold several runs of one task (replay), their leave-one-out group mean is used
  instead (RLOO, a GRPO-style group baseline without the std division);
- step-level signals become turn rewards on the llm_call turn they concern: a tool error is charged
  to the turn that requested the tool, process / verifier / user-feedback signals on a step to the
  nearest llm_call at or before it;
- A_k = sum_{j>=k} process_gamma^(j-k) * r_j + gamma^(K-1-k) * (R - b): the outcome's advantage is
  discounted backwards over turns; step rewards by process_gamma, 0 by default, so a judgement stays
  on the turn it judges (summing them let later mistakes push down an earlier correct call);
- negative advantages can be scaled down (`negative_scale` < 1, asymmetric REINFORCE / self-imitation
  style): on a small model, a batch of mostly failed samples otherwise lowers the tokens that failed
  and successful calls share (the JSON frame, argument keys) along with the mistakes.

Simplifications, stated: no learned value function; the EMA baselines used for a batch are the
ones from before it (then updated with its rewards, in order); a cluster never seen before uses the
leave-one-out mean of its batch, else of the whole batch, else 0; advantages are not divided by
their standard deviation unless asked (`scale_advantages`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evolvable.protocol.models import LLMCallStep, SignalKind, StepStatus, ToolCallStep, Trajectory

__all__ = [
    "DEFAULT_CLUSTER",
    "Episode",
    "RunningBaselines",
    "compute_turn_advantages",
    "discounted_returns",
    "episode_from_trajectory",
    "token_advantages",
]

DEFAULT_CLUSTER = "_default"
_STEP_SIGNAL_KINDS = {SignalKind.process, SignalKind.verifier, SignalKind.user_feedback, SignalKind.judge}


@dataclass
class Episode:
    """What credit assignment needs from one trajectory: its outcome and per-turn rewards."""

    trajectory_id: str
    cluster: str
    task_id: str | None
    outcome: float | None
    turn_ids: list[str]
    turn_rewards: dict[str, float] = field(default_factory=dict)


@dataclass
class RunningBaselines:
    """Per-cluster EMA of the outcome reward; serialisable with the job state."""

    rate: float = 0.1
    means: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def get(self, cluster: str) -> float | None:
        return self.means.get(cluster)

    def update(self, cluster: str, reward: float) -> None:
        if cluster not in self.means:
            self.means[cluster] = reward
        else:
            self.means[cluster] += self.rate * (reward - self.means[cluster])
        self.counts[cluster] = self.counts.get(cluster, 0) + 1

    def state_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "means": dict(self.means), "counts": dict(self.counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rate = float(state.get("rate", self.rate))
        self.means = {str(k): float(v) for k, v in state.get("means", {}).items()}
        self.counts = {str(k): int(v) for k, v in state.get("counts", {}).items()}


def _owning_llm_call(trajectory: Trajectory, step_id: str) -> str | None:
    """The llm_call a step-level signal is about: the step itself, the call that requested a tool,
    or the nearest llm_call before the step."""
    steps = trajectory.steps
    index = next((i for i, s in enumerate(steps) if s.id == step_id), None)
    if index is None:
        return None
    step = steps[index]
    if isinstance(step, LLMCallStep):
        return step.id
    if isinstance(step, ToolCallStep):
        if step.llm_step_id and any(s.id == step.llm_step_id for s in steps):
            return step.llm_step_id
        if step.tool_call_id:
            for s in steps[:index][::-1]:
                message = s.response if isinstance(s, LLMCallStep) else None
                if message and any(tc.id == step.tool_call_id for tc in message.tool_calls or []):
                    return s.id
    return next((s.id for s in steps[:index][::-1] if isinstance(s, LLMCallStep)), None)


def _trajectory_reward(trajectory: Trajectory, process_coef: float) -> float | None:
    """Outcome signal, else the latest run-level verifier or judge score; plus run-level user feedback."""
    reward = trajectory.outcome()
    if reward is None:
        for kind in (SignalKind.verifier, SignalKind.judge):
            found = [s for s in trajectory.signals if s.kind == kind and s.step_id is None]
            if found:
                reward = max(found, key=lambda s: s.created_at).value
                break
    if reward is None:
        return None
    feedback = [s.value for s in trajectory.signals if s.kind == SignalKind.user_feedback and s.step_id is None]
    return reward + process_coef * sum(feedback)


def episode_from_trajectory(
    trajectory: Trajectory,
    turn_ids: Sequence[str],
    *,
    process_coef: float = 0.5,
    tool_error_penalty: float = 0.5,
) -> Episode:
    """Collect the outcome and per-turn rewards of `trajectory`; turn_ids are the llm_call steps that
    made it into training samples, in order. Signals on other (e.g. orphaned) calls are dropped."""
    turns = set(turn_ids)
    rewards: dict[str, float] = defaultdict(float)
    charged_tool_steps: set[str] = set()
    for sig in trajectory.signals:
        if sig.step_id is None:
            continue
        owner = _owning_llm_call(trajectory, sig.step_id)
        if owner not in turns:
            continue
        charged_tool_steps.add(sig.step_id)  # an explicit judgement on a tool step replaces the implicit one
        if sig.kind == SignalKind.tool_error:
            rewards[owner] -= tool_error_penalty * abs(sig.value) * sig.confidence
        elif sig.kind in _STEP_SIGNAL_KINDS or sig.kind == SignalKind.outcome:
            rewards[owner] += process_coef * sig.value * sig.confidence
    for step in trajectory.tool_calls():  # a failed tool without any signal on it still counts
        if step.status == StepStatus.error and step.id not in charged_tool_steps:
            owner = _owning_llm_call(trajectory, step.id)
            if owner in turns:
                rewards[owner] -= tool_error_penalty
    cluster = trajectory.metadata.get("cluster") or trajectory.metadata.get("intent")
    return Episode(
        trajectory_id=trajectory.id,
        cluster=str(cluster) if cluster else DEFAULT_CLUSTER,
        task_id=trajectory.task_id,
        outcome=_trajectory_reward(trajectory, process_coef),
        turn_ids=list(turn_ids),
        turn_rewards=dict(rewards),
    )


def discounted_returns(turn_rewards: Sequence[float], outcome: float, gamma: float) -> list[float]:
    """G_k = r_k + gamma * G_{k+1}, with the outcome added to the last turn's reward."""
    returns = [0.0] * len(turn_rewards)
    running = 0.0
    for k in range(len(turn_rewards) - 1, -1, -1):
        reward = turn_rewards[k] + (outcome if k == len(turn_rewards) - 1 else 0.0)
        running = reward + gamma * running
        returns[k] = running
    return returns


def _leave_one_out(values: list[float], index: int) -> float | None:
    if len(values) < 2:
        return None
    return (sum(values) - values[index]) / (len(values) - 1)


def compute_turn_advantages(
    episodes: Sequence[Episode],
    baselines: RunningBaselines,
    *,
    gamma: float = 1.0,
    process_gamma: float | None = None,
    group_by_task: bool = True,
    scale: bool = False,
    negative_scale: float = 1.0,
) -> dict[str, dict[str, float]]:
    """Advantage per (trajectory_id, llm step id). Episodes without an outcome get none.

    The outcome's part is discounted by `gamma`; step-level rewards by `process_gamma` (None: the
    same gamma). process_gamma=0 credits a step judgement to its own turn only, so three wrong tool
    calls do not add up to a large negative advantage on the first turn's (often correct) tokens.
    `negative_scale` multiplies every negative advantage (after `scale`). Updates `baselines` with the
    batch's outcomes afterwards."""
    scored = [e for e in episodes if e.outcome is not None and e.turn_ids]
    outcomes = [float(e.outcome) for e in scored if e.outcome is not None]  # (all of them: aligned with `scored`)
    by_task: dict[str, list[int]] = defaultdict(list)
    by_cluster: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(scored):
        by_cluster[e.cluster].append(i)
        if e.task_id is not None:
            by_task[e.task_id].append(i)

    def baseline(i: int) -> float:
        e = scored[i]
        group = by_task.get(e.task_id or "", []) if group_by_task and e.task_id is not None else []
        if len(group) >= 2:
            return _leave_one_out([outcomes[j] for j in group], group.index(i)) or 0.0
        prior = baselines.get(e.cluster)
        if prior is not None:
            return prior
        members = by_cluster[e.cluster]
        loo = _leave_one_out([outcomes[j] for j in members], members.index(i))
        if loo is None:
            loo = _leave_one_out(outcomes, i)
        return loo if loo is not None else 0.0

    step_gamma = gamma if process_gamma is None else process_gamma
    result: dict[str, dict[str, float]] = {}
    for i, e in enumerate(scored):
        b = baseline(i)
        rewards = [e.turn_rewards.get(step_id, 0.0) for step_id in e.turn_ids]
        step_returns = discounted_returns(rewards, 0.0, step_gamma)
        last = len(rewards) - 1
        result[e.trajectory_id] = {
            step_id: step_returns[k] + (gamma ** (last - k)) * (outcomes[i] - b) for k, step_id in enumerate(e.turn_ids)
        }
    if scale:
        flat = [a for turns in result.values() for a in turns.values()]
        spread = statistics.pstdev(flat) if len(flat) >= 2 else 0.0
        if spread > 1e-6:
            result = {t: {s: a / spread for s, a in turns.items()} for t, turns in result.items()}
    if negative_scale != 1.0:
        result = {t: {s: a * negative_scale if a < 0 else a for s, a in turns.items()} for t, turns in result.items()}
    for i, e in enumerate(scored):
        baselines.update(e.cluster, outcomes[i])
    return result


def token_advantages(
    step_ids: Sequence[str], token_turn: Sequence[int], turn_advantage: dict[str, float]
) -> list[float]:
    """Spread turn advantages onto tokens: a generated token gets its turn's advantage, others 0."""
    per_turn = [turn_advantage.get(step_id, 0.0) for step_id in step_ids]
    return [per_turn[k] if k >= 0 else 0.0 for k in token_turn]
