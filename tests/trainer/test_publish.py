"""Publishing: manifest with lineage, a candidate policy version in the real registry, hot-loading."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.lora_server import LoraServerState, fake_lora_server

from evolvable.control.models import VersionState
from evolvable.control.policies import adapter_registrar, version_chain
from evolvable.control.registry import Registry
from evolvable.errors import TrainingError, UpstreamError
from evolvable.store import Store
from evolvable.trainer.config import RLConfig
from evolvable.trainer.loop import TrainingResult, run_training_job
from evolvable.trainer.publish import manifest_for, manifest_path, publish, read_manifest


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, trajectory_factory) -> TrainingResult:
    runs = [trajectory_factory(outcome=float(i % 2), cluster="a") for i in range(6)]
    out = tmp_path_factory.mktemp("job") / "job"
    config = RLConfig(
        base_model="tiny-random-llama",
        lora_r=2,
        lora_targets=["q_proj"],
        progress=False,
        output_dir=str(out),
        rollout_batch_size=6,
        micro_batch_size=3,
        grad_accum_steps=2,
    )
    return run_training_job(config, runs)


@pytest.fixture
def lora_server() -> Iterator[LoraServerState]:
    with fake_lora_server() as server:
        yield server


def test_manifest_records_lineage(trained: TrainingResult) -> None:
    manifest = manifest_for(trained, agent="support", parent_policy_version="p1-parent")
    result = publish(trained.adapter_dir, manifest)
    assert result.policy_version is None  # no registry: manifest only
    path = manifest_path(trained.adapter_dir)
    assert Path(result.manifest_path) == path and path.parent == Path(trained.adapter_dir).parent
    again = read_manifest(trained.adapter_dir)
    assert again.base_model == "tiny-random-llama" and again.parent_policy_version == "p1-parent"
    assert again.data["kind"] == "memory" and again.data["sample_stats"]["samples"] == trained.sample_stats["samples"]
    assert again.config["lora_r"] == 2 and "tokens_per_s" in again.metrics
    assert again.digest and again.lora_name.startswith("support-rl-")


def test_registers_a_candidate_policy_version(db_url: str, trained: TrainingResult) -> None:
    registry = Registry(Store.open(db_url).engine)
    first = publish(trained.adapter_dir, manifest_for(trained, agent="support"), register=adapter_registrar(registry))
    record = registry.get(first.policy_version)
    assert record.state == VersionState.candidate and record.agent == "support"
    assert record.policy().adapter_path == str(Path(trained.adapter_dir).resolve())
    assert record.lineage["config"]["lora_r"] == 2 and record.lineage["metrics"]["sample_stats"]["samples"] > 0
    assert json.loads(record.lineage["data_snapshot"]) == {"kind": "memory"}
    child = publish(
        trained.adapter_dir,
        manifest_for(trained, agent="support", parent_policy_version=record.id, lora_name="child"),
        register=adapter_registrar(registry),
    )
    assert version_chain(registry, child.policy_version) == [record.id, child.policy_version]


def test_hot_loads_into_every_server(trained: TrainingResult, lora_server: LoraServerState) -> None:
    manifest = manifest_for(trained, lora_name="rl-1")
    url = lora_server.url
    result = publish(trained.adapter_dir, manifest, servers=[url, url + "/v1"])
    assert result.loaded == [url, url + "/v1"]
    assert (
        lora_server.received
        == [("/v1/load_lora_adapter", {"lora_name": "rl-1", "lora_path": str(Path(trained.adapter_dir).resolve())})] * 2
    )
    lora_server.refuse = True
    with pytest.raises(UpstreamError, match="refused adapter rl-1"):
        publish(trained.adapter_dir, manifest, servers=[url])


def test_refuses_a_directory_that_is_not_an_adapter(tmp_path: Path, trained: TrainingResult) -> None:
    with pytest.raises(TrainingError, match="not a PEFT adapter"):
        publish(tmp_path, manifest_for(trained))
