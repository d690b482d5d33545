"""The product end to end, from one configuration file and real processes only.

The embedded policy server and `evolvable serve --config` run as separate processes on PostgreSQL; a
travel assistant written in this test (plain `openai` client, its own tools and verifier) works through
the proxy under a tenant key; `evolvable control tick` runs the control plane from the same file. The
control plane clusters the agent's traffic, decides, builds a candidate, gates it with the test's own
workload plugin (`object: tests.app.travel_agent:workload`), canaries it on live sessions and records a
verdict. No Python wiring: everything the stack does comes from the YAML below.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from tests.support.serve_process import serve_process

from evolvable.policy_server.launcher import policy_server

from .travel_agent import AGENT, SYSTEM, live_episode, travel_tasks

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def database(postgres_url: str) -> Iterator[str]:
    name = f"e2e_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def write_config(path: Path, db: str, policy_url: str) -> None:
    (path.parent / "trip-planner.json").write_text(json.dumps({"agent": AGENT, "system_prompt": SYSTEM, "memory_k": 2}))
    path.write_text(
        f"""
store: {{url: "{db}"}}
proxy:
  spool_dir: "{path.parent / "spool"}"
policy_servers:
  - {{name: local, kind: embedded, url: "{policy_url}"}}
governance: {{require_keys: true}}
agents:
  - name: {AGENT}
    tenant: travel
    harness: trip-planner.json
    policy: {{base_model: smollm2-135m, upstream: local}}
    workload:
      object: tests.app.travel_agent:workload
      options: {{holdout: 8, seed: 99}}
control:
  tick_interval_s: 0
  levers: [rollback, memory]
  decision: {{min_runs: 12, min_cluster_runs: 2, cooldown: 1}}
  gates: {{require_replay_gain: false}}
  canary: {{share: 0.5, min_runs: 3, tolerance: 0.25, max_extensions: 3}}
  verdict_min_runs: 3
  clustering: {{min_runs: 12, k: 2}}
"""
    )


def env(home: Path, admin_key: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "EVOLVABLE_HOME": str(home),
        "EVOLVABLE_ADMIN_KEY": admin_key,
        "HF_HUB_OFFLINE": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
    }


@pytest.fixture
def served(tmp_path: Path, database: str) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """(proxy /v1 URL, config path, environment) with the policy server and `serve` running."""
    admin_key = "adm-" + secrets.token_urlsafe(16)
    with policy_server("smollm2-135m", tmp_path / "policy.log", max_batch=16) as policy_url:
        config = tmp_path / "evolvable.yaml"
        write_config(config, database, policy_url)
        environment = env(tmp_path / "home", admin_key)
        with serve_process(config, environment, tmp_path / "serve.log", stop_s=30) as base:
            yield base, config, environment | {"ADMIN": admin_key}


def control_tick(config: Path, environment: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "evolvable.cli.main", "control", "tick", "--config", str(config), "--json"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_round(base: str, key: str, n: int, seed: int) -> None:
    """`n` live runs at temperature 0.9, each sampled with its own fixed seed: which runs succeed (and so what the
    memory lever learns from) is the same in every test run, not a draw of the sampler's entropy."""
    tasks = travel_tasks(n, seed=seed, prefix="live")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: live_episode(base, key, tasks[i], temperature=0.9, seed=seed * 1000 + i), range(n)))


def wait_stored(base: str, key: str, expected: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = httpx.get(f"{base}/trajectories", params={"limit": 500}, headers={"Authorization": f"Bearer {key}"})
        finished = [t for t in got.json()["data"] if t["status"] != "running"]
        if len(finished) >= expected:
            return
        time.sleep(0.5)
    raise AssertionError(f"the proxy stored fewer than {expected} finished runs")


def test_serve_clusters_decides_gates_canaries_and_judges_from_configuration(served) -> None:
    base, config, environment = served
    admin = {"Authorization": f"Bearer {environment['ADMIN']}"}
    for tenant in ("travel", "hotel-chain"):
        assert httpx.post(f"{base}/admin/tenants", json={"id": tenant}, headers=admin).status_code == 201
    key = httpx.post(f"{base}/admin/tenants/travel/keys", json={"label": "agent"}, headers=admin).json()["key"]
    other = httpx.post(f"{base}/admin/tenants/hotel-chain/keys", json={}, headers=admin).json()["key"]
    auth = {"Authorization": f"Bearer {key}"}

    total = 16
    run_round(base, key, total, seed=1)
    wait_stored(base, key, total)
    first = control_tick(config, environment)
    assert first["leader"] is True
    actions = "\n".join(first["actions"])  # type: ignore[arg-type]
    assert "task clusterer v1 (2 clusters)" in actions, actions

    status = httpx.get(f"{base}/control/status", headers=auth).json()[AGENT]
    assert set(status["clusters"]) == {"c0", "c1"}, status  # the traffic, clustered by what it asks for
    decisions = httpx.get(f"{base}/control/decisions", headers=auth).json()["data"]
    assert decisions and decisions[0]["lever"] == "memory", (actions, decisions)
    decision = decisions[0]
    assert decision["tenant"] == "travel" and decision["candidate_version"]
    assert decision["gates"]["safety"]["passed"] is True and "replay" in decision["gates"], decision["gates"]
    assert decision["state"] == "canary", (decision["state"], decision["gates"])

    # Not visible to another tenant, not visible without a key.
    foreign = httpx.get(f"{base}/control/decisions/{decision['id']}", headers={"Authorization": f"Bearer {other}"})
    assert foreign.status_code == 404
    assert httpx.get(f"{base}/control/decisions/{decision['id']}").status_code == 401

    seed = 2
    while decision["verdict"] is None and seed < 6:
        time.sleep(6)  # the serving replica's harness router picks the canary up (refreshed every 5 s)
        run_round(base, key, 12, seed=seed)
        total += 12
        wait_stored(base, key, total)
        control_tick(config, environment)
        decision = httpx.get(f"{base}/control/decisions/{decision['id']}", headers=auth).json()
        seed += 1
    rollout = httpx.get(f"{base}/control/rollouts/{decision['rollout_id']}", headers=auth).json()
    assert rollout["analyses"], rollout  # the canary was analysed on live sessions of both versions
    assert rollout["state"] in ("promoted", "rolled_back"), rollout
    assert decision["state"] in ("promoted", "rolled_back") and decision["verdict"] is not None, decision
    served_by = {a["candidate"]["n"] for a in rollout["analyses"]}
    assert max(served_by) > 0  # live sessions ran the candidate
    print(f"\ncontrol plane: {actions}\ndecision {decision['state']}, verdict {decision['verdict']}, rollout {rollout}")
