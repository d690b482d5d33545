"""Adapters leave every policy server when their version stops serving, and come back when it serves again:
rolled back, superseded on promote, retired by erasure; against the vLLM-shaped fake (here) and the
embedded policy server as a real process (slow)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.vllm_fake import fake_vllm

from evolvable.control.adapters import AdapterSync, loaded_adapters
from evolvable.control.erasure import WeightsErasure
from evolvable.control.journal import Journal
from evolvable.control.models import PolicySpec, VersionKind, VersionState
from evolvable.control.registry import Registry
from evolvable.control.runtime import ControlPlane
from evolvable.errors import UpstreamError
from evolvable.governance.purge import Purger, PurgeRequest
from evolvable.protocol.models import Trajectory
from evolvable.store import Store
from evolvable.trainer.publish import load_lora

AGENT = "desk"


def adapter_dir(root: Path, name: str) -> str:
    """What the fake checks: a directory holding `adapter_config.json`."""
    path = root / name
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")
    return str(path)


def publish(registry: Registry, server: str, name: str, path: str, parent: str, trained_on: list[str]) -> str:
    """What the weights lever does: hot-load, then register the candidate."""
    load_lora(server, name, path)
    spec = PolicySpec(base_model="base", lora_name=name, adapter_path=path)
    data = json.dumps({"trajectory_ids": trained_on})
    return registry.register_policy(AGENT, spec, parent=parent, data_snapshot=data).id


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Store, Registry, str, str]]:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    registry = Registry(store.engine)
    base = registry.register_policy(AGENT, PolicySpec(base_model="base"), state=VersionState.active).id
    with fake_vllm("base") as server:
        yield store, registry, base, server


def test_a_rolled_back_canary_is_unloaded_and_hand_loaded_adapters_stay(world, tmp_path) -> None:
    store, registry, base, server = world
    v1 = publish(registry, server, "rl-1", adapter_dir(tmp_path, "rl-1"), base, [])
    load_lora(server, "by-hand", adapter_dir(tmp_path, "by-hand"))
    sync = AdapterSync((server,))
    assert sync.sync(registry) == []  # a candidate stays loaded: the gates replay it
    registry.start_canary(v1)
    journal = Journal(store.engine)
    rollout = journal.start_rollout(AGENT, VersionKind.policy, v1, base, 0.5, None)
    plane = ControlPlane(store, adapters=sync)
    plane.rollback(rollout.id, reason="canary lost")
    assert loaded_adapters(server) == {"by-hand"}  # the registry does not know it: left alone
    assert registry.get(base).state == VersionState.active


def test_promoting_unloads_the_superseded_adapter_and_restoring_loads_it_again(world, tmp_path) -> None:
    _, registry, base, server = world
    sync = AdapterSync((server,))
    v1 = publish(registry, server, "rl-1", adapter_dir(tmp_path, "rl-1"), base, [])
    registry.promote(v1)
    v2 = publish(registry, server, "rl-2", adapter_dir(tmp_path, "rl-2"), v1, [])
    registry.promote(v2)
    assert sync.sync(registry) == [f"unloaded retired adapter rl-1 from {server}"]
    assert loaded_adapters(server) == {"rl-2"}
    registry.restore(v1, reason="rollback")  # an earlier adapter serves again: it must be loaded first
    actions = sync.sync(registry)
    assert loaded_adapters(server) == {"rl-1"}, actions
    assert any(a.startswith("loaded adapter rl-1 of serving version") for a in actions)


def test_a_purge_that_retires_an_adapter_unloads_it_at_once(world, tmp_path) -> None:
    store, registry, base, server = world
    run = Trajectory(agent=AGENT, tenant_id="default", end_user="alice", task_input="refund please")
    store.put_trajectory(run)
    v1 = publish(registry, server, "rl-1", adapter_dir(tmp_path, "rl-1"), base, [run.id])
    registry.promote(v1)
    erasure = WeightsErasure(Registry(store.engine, tenant=None), adapters=AdapterSync((server,)))
    report = Purger(store, erasers=[erasure]).purge(PurgeRequest(end_user="alice"), actor="test")
    assert report.derived["adapters"][0]["action"] == f"retired; {base} restored"
    assert report.derived["policy_servers"] == [f"unloaded retired adapter rl-1 from {server}"]
    assert loaded_adapters(server) == set()


def test_an_unreachable_server_is_reported_not_raised(world, tmp_path) -> None:
    _, registry, base, server = world
    v1 = publish(registry, server, "rl-1", adapter_dir(tmp_path, "rl-1"), base, [])
    registry.promote(v1)
    registry.restore(base)
    [action] = AdapterSync(("http://127.0.0.1:9",)).sync(registry)
    assert action.startswith("adapters not synchronised: cannot list the adapters of policy server")
    with pytest.raises(UpstreamError):
        loaded_adapters("http://127.0.0.1:9")


@pytest.mark.slow
def test_the_embedded_policy_server_unloads_retired_adapters(tmp_path: Path) -> None:
    """The same reconciliation against the real embedded server, with real PEFT adapters."""
    import torch
    from peft import LoraConfig, get_peft_model

    from evolvable.model_loading import load_base_model
    from evolvable.policy_server.launcher import policy_server

    model, _ = load_base_model()
    paths = {}
    for i, name in enumerate(("rl-1", "rl-2")):
        torch.manual_seed(i)
        config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], init_lora_weights=False)
        paths[name] = str(tmp_path / name)
        peft_model = get_peft_model(model, config)
        peft_model.save_pretrained(paths[name])
        model = peft_model.unload()  # the base model again for the next adapter
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    registry = Registry(store.engine)
    base = registry.register_policy(AGENT, PolicySpec(base_model="smollm2-135m"), state=VersionState.active).id
    with policy_server("smollm2-135m", tmp_path / "policy.log") as url:
        server = url.removesuffix("/v1")
        sync = AdapterSync((server,))
        v1 = publish(registry, server, "rl-1", paths["rl-1"], base, [])
        registry.promote(v1)
        v2 = publish(registry, server, "rl-2", paths["rl-2"], v1, [])
        registry.promote(v2)
        sync.sync(registry)
        assert loaded_adapters(server) == {"rl-2"}
        registry.restore(v1)
        sync.sync(registry)
        assert loaded_adapters(server) == {"rl-1"}
        reply = httpx.post(
            f"{url}/chat/completions",
            json={"model": "rl-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
