"""Training-set assembly: exclusion rules counted by reason, staleness weights, advantages on tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolvable.errors import TrainingError
from evolvable.protocol.models import LLMCallStep
from evolvable.store import Store, TrajectoryFilter
from evolvable.trainer.advantages import RunningBaselines
from evolvable.trainer.config import RLConfig
from evolvable.trainer.samples import (
    FileSource,
    StoreSource,
    build_training_set,
    describe_source,
    iter_trajectories,
    read_samples_jsonl,
    write_samples_jsonl,
)


def test_exclusions_are_counted_by_reason(trajectory_factory) -> None:
    make = trajectory_factory
    no_ids = make()
    step = no_ids.steps[0]
    assert isinstance(step, LLMCallStep)
    step.prompt_token_ids = None
    trajectories = [
        make(outcome=1.0, harness_version="h1", policy_version="p3"),
        make(outcome=0.0, harness_version="h1", policy_version="p2"),
        make(status="running", harness_version="h1"),
        no_ids.model_copy(update={"harness_version": "h1"}),
        make(harness_version="h0", policy_version="p3"),
        make(harness_version="h1", policy_version="p0"),  # lag 3 > 2
        make(harness_version="h1", policy_version="unknown"),
        make(harness_version="h1", policy_version="p3", outcome=None),
        make(harness_version="h1", policy_version="p3", with_logprobs=False),
        make(harness_version="h1", policy_version="p3", completion=list(range(1, 200))),
    ]
    config = RLConfig(
        harness_version="h1",
        policy_versions=["p0", "p1", "p2", "p3"],
        max_staleness=2,
        staleness_decay=0.5,
        max_seq_len=100,
    )
    samples, stats = build_training_set(trajectories, config, RunningBaselines())
    assert dict(stats.excluded) == {
        "running": 1,
        "no_token_ids": 1,
        "harness_mismatch": 1,
        "stale": 1,
        "unknown_policy_version": 1,
        "no_reward": 1,
        "no_logprobs": 1,
        "too_long": 1,
    }
    assert stats.trajectories_seen == 10 and stats.samples == 2
    by_version = {s.policy_version: s for s in samples}
    assert by_version["p3"].weight == 1.0 and by_version["p3"].staleness == 0
    assert by_version["p2"].weight == 0.5 and by_version["p2"].staleness == 1
    # two runs of one cluster, rewards 1 and 0: leave-one-out baselines give +1 and -1
    assert {round(max(s.advantages, key=abs), 6) for s in samples} == {1.0, -1.0}


def test_completion_tokens_replaced_by_redaction_are_never_trained_on(trajectory_factory) -> None:
    partly = trajectory_factory(outcome=1.0, completion=[5, 6, 7, 8])
    partly.steps[0].choices[0].redacted_token_spans = [(1, 3)]  # a tokenized placeholder the policy never sampled
    fully = trajectory_factory(outcome=1.0, completion=[9, 10])
    fully.steps[0].choices[0].redacted_token_spans = [(0, 2)]
    plain = trajectory_factory(outcome=0.0, completion=[11, 12])
    samples, stats = build_training_set([partly, fully, plain], RLConfig(), RunningBaselines())
    assert dict(stats.excluded) == {"empty": 1}
    by_trajectory = {s.trajectory_id: s for s in samples}
    sample = by_trajectory[partly.id]
    assert sample.loss_mask[-4:] == [1, 0, 0, 1] and sample.behaviour_logprobs[-4:] == [-2.0, 0.0, 0.0, -2.0]
    assert sample.num_generated == 2 and stats.generated_tokens == 4


def test_other_harness_and_unknown_versions_can_be_allowed(trajectory_factory) -> None:
    trajectories = [trajectory_factory(harness_version="h0", policy_version="x", outcome=float(i)) for i in range(2)]
    config = RLConfig(
        harness_version="h1", allow_other_harness=True, policy_versions=["p0"], allow_unknown_policy_version=True
    )
    samples, stats = build_training_set(trajectories, config, RunningBaselines())
    assert len(samples) == 2 and not stats.excluded


def test_multi_turn_advantages_only_on_generated_tokens(trajectory_factory) -> None:
    run = trajectory_factory(turns=3, outcome=1.0, cluster="c")
    config = RLConfig(gamma=0.5)
    (sample,), _ = build_training_set([run], config, RunningBaselines(means={"c": 0.0}))
    assert len(sample.input_ids) == len(sample.advantages) == len(sample.loss_mask)
    values = sorted({a for a, m in zip(sample.advantages, sample.loss_mask, strict=True) if m})
    assert values == pytest.approx([0.25, 0.5, 1.0])
    assert all(a == 0.0 for a, m in zip(sample.advantages, sample.loss_mask, strict=True) if not m)


def test_zero_advantage_samples_are_dropped(trajectory_factory) -> None:
    runs = [trajectory_factory(outcome=1.0, cluster="a") for _ in range(2)]
    samples, stats = build_training_set(runs, RLConfig(), RunningBaselines())
    assert samples == [] and stats.excluded["zero_advantage"] == 2


def test_baselines_are_updated_by_the_batch(synthetic_set) -> None:
    baselines = RunningBaselines()
    build_training_set(synthetic_set, RLConfig(), baselines)
    assert set(baselines.means) == {"a", "b"} and sum(baselines.counts.values()) == 16


def test_file_source_and_samples_roundtrip(tmp_path: Path, synthetic_set) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(t.model_dump_json() + "\n" for t in synthetic_set))
    assert [t.id for t in iter_trajectories(FileSource(str(path)))] == [t.id for t in synthetic_set]
    samples, _ = build_training_set(iter_trajectories(FileSource(str(path))), RLConfig(), RunningBaselines())
    write_samples_jsonl(samples, tmp_path / "s.jsonl")
    assert read_samples_jsonl(tmp_path / "s.jsonl") == samples
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"steps": "nope"}\n')
    with pytest.raises(TrainingError, match=r"bad\.jsonl:1"):
        list(iter_trajectories(FileSource(str(bad))))
    with pytest.raises(TrainingError, match="does not exist"):
        list(iter_trajectories(FileSource(str(tmp_path / "missing.jsonl"))))


def test_store_source_on_both_backends(db_url: str, synthetic_set) -> None:
    store = Store.open(db_url)
    for i, t in enumerate(synthetic_set):
        t.agent = "support" if i < 10 else "other"
        store.put_trajectory(t)
    source = StoreSource(db_url, {"agent": "support"})
    got = list(iter_trajectories(source))
    assert len(got) == 10
    assert describe_source(source) == {"kind": "store", "filter": {"agent": "support"}}
    samples, stats = build_training_set(got, RLConfig(), RunningBaselines())
    assert stats.trajectories_seen == 10 and samples
    assert len(list(iter_trajectories(StoreSource(db_url, TrajectoryFilter(agent="other"))))) == 6
    json.dumps(describe_source(StoreSource(db_url, TrajectoryFilter(agent="other"))))


def test_dataset_snapshot_source(db_url: str, synthetic_set) -> None:
    from evolvable.governance.datasets import DatasetCatalog
    from evolvable.trainer.samples import DatasetSource

    store = Store.open(db_url)
    for t in synthetic_set[:5]:
        store.put_trajectory(t)
    catalog = DatasetCatalog(store)
    info = catalog.create("rl-train", dedup="none")
    source = DatasetSource(info.name, info.version, info.id, info.content_hash, lambda: catalog.iter_items(info.id))
    got = list(iter_trajectories(source))
    assert len(got) == info.counts.get("items", len(got)) and 0 < len(got) <= 5
    lineage = describe_source(source)
    assert lineage["kind"] == "dataset" and lineage["dataset_id"] == info.id and lineage["content_hash"]
