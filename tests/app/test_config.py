"""The configuration: one file validates with errors that name the key; the shipped example passes `config check`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evolvable.app import ConfigError, load_config, parse_config
from evolvable.app.control import control_config
from evolvable.control.models import Lever

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "evolvable.vllm-two-tenants.yaml"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evolvable.cli.main", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_shipped_vllm_example_passes_config_check() -> None:
    done = cli("config", "check", str(EXAMPLE), "--json")
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    assert {a["tenant"] for a in resolved["agents"]} == {"retailer", "insurer"}
    assert resolved["control"]["approval"]["levers"] == ["prompt", "weights"]
    assert resolved["proxy"]["upstreams"][0]["token_capture"] == "always"
    assert all("api_key" not in u for u in resolved["proxy"]["upstreams"])
    assert resolved["control"]["gates"]["alpha"] == 0.05  # defaults are filled in
    assert "retailer_agents" in done.stderr  # the team's plugin is not installed here: a warning, not an error
    assert parse_config(resolved).resolved() == resolved  # what it prints is a configuration again
    assert cli("config", "check", str(EXAMPLE), "--strict").returncode == 2


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("control: {canary: {share: 1.5}}", "control.canary.share"),
        ("control: {levres: [memory]}", "control.levres"),
        ("control: {levers: [memroy]}", "control.levers.0"),
        ("agents: [{name: a, workload: {entry_point: x, webhook: 'http://h'}}]", "agents.0.workload"),
        ("agents: [{name: a, workload: {object: no_colon}}]", "agents.0.workload"),
        ("agents: [{name: a, replay_upstream: nowhere}]", "agents.0.replay_upstream"),
        ("policy_servers: [{name: v, kind: vllm}]", "policy_servers.0"),
        ("control: {evolver: {model: m}}", "control.evolver"),
        ("proxy: {upstreams: [{name: u}]}", "proxy"),
        ("server: {port: -1}", "server.port"),
    ],
)
def test_invalid_configuration_names_the_key(tmp_path: Path, yaml_text: str, key: str) -> None:
    path = tmp_path / "evolvable.yaml"
    path.write_text("proxy: {upstreams: [{name: up, base_url: 'http://x/v1'}]}\n" + yaml_text + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert key in str(err.value)


def test_config_check_exits_non_zero_naming_every_bad_key(tmp_path: Path) -> None:
    path = tmp_path / "evolvable.yaml"
    path.write_text("control: {canary: {share: 1.5}, levres: []}\nagents: [{name: a, workload: {}}]\n")
    done = cli("config", "check", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    for key in ("control.canary.share", "control.levres", "agents.0.workload"):
        assert key in done.stderr


def test_toml_and_file_relative_harness(tmp_path: Path) -> None:
    (tmp_path / "h.json").write_text(json.dumps({"agent": "a", "system_prompt": "hi"}))
    path = tmp_path / "evolvable.toml"
    path.write_text(
        '[[proxy.upstreams]]\nname = "up"\nbase_url = "http://x/v1"\n'
        '[[agents]]\nname = "a"\ntenant = "t1"\nharness = "h.json"\n'
        '[control]\nlevers = ["memory", "rollback"]\n[control.canary]\nshare = 0.25\n'
    )
    cfg = load_config(path)
    assert cfg.agents[0].harness == tmp_path / "h.json"
    settings = control_config(cfg)
    assert settings.decision.levers == frozenset({Lever.memory, Lever.rollback})
    assert settings.canary.share == 0.25


def test_unreadable_or_unparsable_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config(bad)
    with pytest.raises(ConfigError, match="mapping"):
        parse_config(["not", "a", "mapping"])


def test_the_same_agent_twice_in_one_tenant_is_refused() -> None:
    with pytest.raises(ConfigError, match="listed twice"):
        parse_config({"agents": [{"name": "a"}, {"name": "a"}]})
    parse_config({"agents": [{"name": "a", "tenant": "t1"}, {"name": "a", "tenant": "t2"}]})


def test_a_proxy_only_file_is_still_a_configuration(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("upstreams: [{name: up, base_url: 'http://x/v1'}]\nspool_fsync: batch\n")
    cfg = load_config(path)
    assert cfg.proxy["spool_fsync"] == "batch" and cfg.agents == []


def test_serve_flags_override_the_file() -> None:
    from evolvable.cli.serve import apply_overrides

    cfg = parse_config({"server": {"port": 9000}, "control": {"tick_interval_s": 30}})
    apply_overrides(cfg, upstream="http://up/v1", db="sqlite:///x.db", port=9100, control_interval=0, governance=False)
    assert cfg.server.port == 9100 and cfg.store.url == "sqlite:///x.db"
    assert cfg.control.tick_interval_s == 0 and cfg.governance.enabled is False
    assert cfg.proxy["upstreams"][0] == {"name": "default", "base_url": "http://up/v1"}
    assert cfg.proxy["default_upstream"] == "default"
