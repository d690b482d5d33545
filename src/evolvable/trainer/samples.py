"""Assemble a training set: trajectories -> token samples -> staleness rules -> advantages.

Sources: the store (`Store.iter_trajectories` with a filter), an ATDP JSONL file (e.g. a dataset
export), a named dataset snapshot, or trajectories in memory. Every sample that does not make it
into the training set is counted under an explicit reason, so a job's report says what it skipped:

    running             the trajectory has not ended
    no_token_ids        an llm_call lacks engine token ids (never re-tokenized; see rl_samples)
    no_llm_calls        nothing the policy generated
    harness_mismatch    recorded under another harness version than the configured one
    no_logprobs         the behaviour logprobs were not recorded (the decoupled ratio needs them)
    too_long            longer than max_seq_len (excluded, not truncated: truncation cuts turns)
    empty               no generated token
    unknown_policy_version / stale   policy version unknown, or more than max_staleness behind
    no_reward           no outcome (or run-level verifier/judge) signal
    zero_advantage      every token's advantage is 0: no gradient, only cost

Proximal logprobs are not computed here: the loop recomputes them with the current policy at the
start of each PPO iteration (decoupled PPO).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evolvable.errors import ConversionError, TrainingError
from evolvable.protocol.converters.rl_samples import RLSample, trajectory_to_samples
from evolvable.protocol.models import Trajectory, TrajectoryStatus
from evolvable.trainer.advantages import (
    Episode,
    RunningBaselines,
    compute_turn_advantages,
    episode_from_trajectory,
    token_advantages,
)
from evolvable.trainer.config import RLConfig

__all__ = [
    "DatasetSource",
    "FileSource",
    "SampleStats",
    "SamplesSource",
    "StoreSource",
    "TrainingSample",
    "build_training_set",
    "describe_source",
    "iter_trajectories",
    "read_samples_jsonl",
    "write_samples_jsonl",
]


@dataclass
class TrainingSample:
    """One sequence ready for the loss: per-token lists aligned with input_ids."""

    sample_id: str
    trajectory_id: str
    input_ids: list[int]
    loss_mask: list[int]
    behaviour_logprobs: list[float]
    advantages: list[float]
    weight: float = 1.0
    policy_version: str | None = None
    harness_version: str | None = None
    cluster: str | None = None
    task_id: str | None = None
    staleness: int = 0

    @property
    def num_generated(self) -> int:
        return sum(self.loss_mask)


@dataclass
class SampleStats:
    trajectories_seen: int = 0
    trajectories_used: int = 0
    samples: int = 0
    tokens: int = 0
    generated_tokens: int = 0
    excluded: Counter[str] = field(default_factory=Counter)
    """Reason -> count. Trajectory-level reasons count trajectories, the others count samples."""
    reward_mean: float | None = None
    clusters: Counter[str] = field(default_factory=Counter)
    policy_versions: Counter[str] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("excluded", "clusters", "policy_versions"):
            data[key] = dict(getattr(self, key))
        return data


# ----------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class StoreSource:
    """Trajectories matching `filter` (a TrajectoryFilter or its keyword dict) in the store at `url`."""

    url: str | None = None
    filter: Any = None


@dataclass(frozen=True)
class FileSource:
    """A JSONL file, one ATDP Trajectory per line (what `dataset export --format atdp` writes)."""

    path: str


@dataclass(frozen=True)
class DatasetSource:
    """A named, immutable dataset snapshot the caller resolved (governance curation owns datasets;
    the trainer only reads the trajectories it is handed and records their identity as lineage)."""

    name: str
    version: int
    dataset_id: str
    content_hash: str
    load: Callable[[], Iterable[Trajectory]] = field(compare=False, repr=False)
    """Reads the snapshot's frozen trajectories; called once per pass."""


SamplesSource = StoreSource | FileSource | DatasetSource | Iterable[Trajectory]


def describe_source(source: SamplesSource) -> dict[str, Any]:
    """The data lineage recorded in a published adapter's manifest."""
    if isinstance(source, StoreSource):
        flt = source.filter
        if hasattr(flt, "model_dump"):
            flt = flt.model_dump(mode="json", exclude_none=True)
        elif hasattr(flt, "__dataclass_fields__"):
            flt = {k: v for k, v in asdict(flt).items() if v is not None}
        return {"kind": "store", "filter": json.loads(json.dumps(flt or {}, default=str))}
    if isinstance(source, FileSource):
        return {"kind": "file", "path": source.path}
    if isinstance(source, DatasetSource):
        return {
            "kind": "dataset",
            "name": source.name,
            "version": source.version,
            "dataset_id": source.dataset_id,
            "content_hash": source.content_hash,
        }
    return {"kind": "memory"}


def _store_filter(value: Any) -> Any:
    from evolvable.store import TrajectoryFilter

    if value is None:
        return TrajectoryFilter()
    if isinstance(value, dict):
        return TrajectoryFilter(**value)
    return value


def iter_trajectories(source: SamplesSource) -> Iterator[Trajectory]:
    """Stream the source's trajectories (bounded memory for the store and files)."""
    if isinstance(source, StoreSource):
        from evolvable.store import Store

        yield from Store.open(source.url).iter_trajectories(_store_filter(source.filter))
    elif isinstance(source, FileSource):
        path = Path(source.path)
        if not path.is_file():
            raise TrainingError(f"trajectory file {path} does not exist")
        with path.open() as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    yield Trajectory.model_validate_json(line)
                except ValueError as err:
                    raise TrainingError(f"{path}:{number}: not an ATDP trajectory: {err}") from None
    elif isinstance(source, DatasetSource):
        yield from source.load()
    else:
        yield from source


# ----------------------------------------------------------------------------- the rules


class _Staleness:
    def __init__(self, config: RLConfig) -> None:
        self.order = {v: i for i, v in enumerate(config.policy_versions)}
        self.current = len(config.policy_versions) - 1
        self.config = config

    def lag(self, sample: RLSample) -> int | None:
        """Versions between the oldest generated token's policy and the current one; None if unknown."""
        if not self.order:
            return 0
        versions = {v for v, m in zip(sample.token_policy_versions, sample.loss_mask, strict=True) if m}
        lags = []
        for version in versions:
            if version not in self.order:
                if not self.config.allow_unknown_policy_version:
                    return None
                continue
            lags.append(self.current - self.order[version])
        return max(lags, default=0)


def build_training_set(
    trajectories: Iterable[Trajectory], config: RLConfig, baselines: RunningBaselines
) -> tuple[list[TrainingSample], SampleStats]:
    """Apply the rules above and assign advantages; updates `baselines` with the batch's rewards."""
    stats = SampleStats()
    staleness = _Staleness(config)
    kept: list[tuple[RLSample, int]] = []
    episodes: list[Episode] = []
    harness_of: dict[str, str | None] = {}
    for trajectory in trajectories:
        stats.trajectories_seen += 1
        if trajectory.status == TrajectoryStatus.running:
            stats.excluded["running"] += 1
            continue
        if (
            config.harness_version is not None
            and trajectory.harness_version != config.harness_version
            and not config.allow_other_harness
        ):
            stats.excluded["harness_mismatch"] += 1
            continue
        try:
            converted = trajectory_to_samples(trajectory)
        except ConversionError:
            stats.excluded["no_token_ids"] += 1
            continue
        if not converted:
            stats.excluded["no_llm_calls"] += 1
            continue
        usable: list[tuple[RLSample, int]] = []
        for sample in converted:
            reason = None
            lag = staleness.lag(sample)
            if sample.behaviour_logprobs is None:
                reason = "no_logprobs"
            elif len(sample.input_ids) > config.max_seq_len:
                reason = "too_long"
            elif sample.num_generated == 0:
                reason = "empty"
            elif lag is None:
                reason = "unknown_policy_version"
            elif lag > config.max_staleness:
                reason = "stale"
            if reason:
                stats.excluded[reason] += 1
            else:
                usable.append((sample, lag or 0))
        if not usable:
            continue
        turn_ids = [step_id for sample, _ in usable for step_id in sample.step_ids]
        episode = episode_from_trajectory(
            trajectory, turn_ids, process_coef=config.process_coef, tool_error_penalty=config.tool_error_penalty
        )
        if episode.outcome is None and config.require_outcome:
            stats.excluded["no_reward"] += len(usable)
            continue
        if episode.outcome is None:
            episode.outcome = 0.0
        episodes.append(episode)
        harness_of[trajectory.id] = trajectory.harness_version
        kept += usable

    advantages = compute_turn_advantages(
        episodes,
        baselines,
        gamma=config.gamma,
        process_gamma=config.process_gamma,
        group_by_task=config.group_by_task,
        scale=config.scale_advantages,
        negative_scale=config.negative_advantage_scale,
    )
    cluster_of = {e.trajectory_id: e.cluster for e in episodes}
    out: list[TrainingSample] = []
    for sample, lag in kept:
        per_token = token_advantages(sample.step_ids, sample.token_turn, advantages.get(sample.trajectory_id, {}))
        if not any(a != 0.0 and m for a, m in zip(per_token, sample.loss_mask, strict=True)):
            stats.excluded["zero_advantage"] += 1
            continue
        out.append(
            TrainingSample(
                sample_id=sample.sample_id,
                trajectory_id=sample.trajectory_id,
                input_ids=list(sample.input_ids),
                loss_mask=list(sample.loss_mask),
                behaviour_logprobs=list(sample.behaviour_logprobs or []),
                advantages=per_token,
                weight=config.staleness_decay**lag,
                policy_version=sample.policy_version,
                harness_version=harness_of.get(sample.trajectory_id),
                cluster=cluster_of.get(sample.trajectory_id),
                task_id=sample.task_id,
                staleness=lag,
            )
        )
    stats.trajectories_used = len({s.trajectory_id for s in out})
    stats.samples = len(out)
    stats.tokens = sum(len(s.input_ids) for s in out)
    stats.generated_tokens = sum(s.num_generated for s in out)
    rewards = [e.outcome for e in episodes if e.outcome is not None]
    stats.reward_mean = sum(rewards) / len(rewards) if rewards else None
    stats.clusters.update(s.cluster or "" for s in out)
    stats.policy_versions.update(str(s.policy_version) for s in out)
    return out, stats


# ----------------------------------------------------------------------------- files


def write_samples_jsonl(samples: Iterable[TrainingSample], path: str | Path) -> None:
    with Path(path).open("w") as handle:
        for sample in samples:
            handle.write(json.dumps(asdict(sample)) + "\n")


def read_samples_jsonl(path: str | Path) -> list[TrainingSample]:
    with Path(path).open() as handle:
        return [TrainingSample(**json.loads(line)) for line in handle if line.strip()]
