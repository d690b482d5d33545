"""One leader, proven with real processes: two `evolvable serve` replicas on one PostgreSQL database.

Replica A leads and is killed with SIGKILL in the middle of a decision's gates. Replica B, which acted on
nothing while A led, takes over once PostgreSQL drops A's advisory lock, abandons A's half-made decision
(recording why), and takes the decision again, once, to the canary.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.control.conftest import AGENT, make_trajectory, scripted_success, tasks

from evolvable.control.journal import Journal
from evolvable.control.models import Decision, DecisionState, VersionKind, VersionState
from evolvable.control.registry import Registry
from evolvable.policy_server.launcher import free_port
from evolvable.store import Store

from .test_serve_end_to_end import database as database
from .test_serve_end_to_end import env

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
LEASE_S = 10


def write_config(path: Path, db: str) -> None:
    path.write_text(
        f"""
store: {{url: "{db}"}}
proxy:
  upstreams: [{{name: unused, base_url: "http://127.0.0.1:9/v1"}}]  # each replica spools under its own home
governance: {{require_keys: true}}
agents:
  - name: {AGENT}
    workload: {{object: "tests.app.scripted_workload:workload"}}
control:
  tick_interval_s: 1
  leader_lease_s: {LEASE_S}
  levers: [rollback, memory]
  decision: {{min_runs: 12, min_cluster_runs: 2, recurring_label_min: 2}}
  canary: {{share: 0.5, min_runs: 6}}
  clustering: {{enabled: false}}
"""
    )


class Replica:
    def __init__(self, config: Path, home: Path, gate_delay_s: float, log: Path) -> None:
        self.port = free_port()
        environment = env(home, "adm-unused") | {"EVOLVABLE_TEST_GATE_DELAY_S": str(gate_delay_s)}
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evolvable.cli.main", "serve", "--config", str(config), "--port", str(self.port)],
            env=environment,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.log_path = log

    def wait_ready(self) -> Replica:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/v1/control/status", timeout=2).status_code == 401:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError("a replica did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def leads(self, decision: Decision) -> bool:
        return f":{self.proc.pid}:" in str(decision.evidence.get("leader"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.log.close()


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def replicas(tmp_path: Path, database: str) -> Iterator[tuple[Path, str, list[Replica]]]:
    config = tmp_path / "evolvable.yaml"
    write_config(config, database)
    started: list[Replica] = []
    try:
        yield config, database, started
    finally:
        for r in started:
            r.stop()


def test_kill_9_the_leader_mid_decision_and_the_other_replica_takes_over(replicas, tmp_path: Path) -> None:
    config, db, started = replicas
    a = Replica(config, tmp_path / "home-a", gate_delay_s=600, log=tmp_path / "a.log").wait_ready()
    started.append(a)
    store = Store.open(db)
    try:
        registry, journal = Registry(store.engine), Journal(store.engine)
        active = wait_for(lambda: registry.current(AGENT, VersionKind.harness, VersionState.active), 60, "bootstrap")
        for i, task in enumerate(tasks(24, "live")):  # recorded traffic: some clusters fail, some runs succeed
            ok = scripted_success(active.harness(), task, i)
            store.put_trajectory(
                make_trajectory(cluster=task.cluster, success=ok, harness_version=active.id, task_text=task.text)
            )
        cut = wait_for(
            lambda: [d for d in journal.decisions(AGENT, [DecisionState.proposed]) if d.candidate_version],
            60,
            "A's decision to reach its gates",
        )[0]
        assert a.leads(cut) and cut.candidate_version  # A decided, built the candidate, and is in its gates
        # The tick runs beside the server, not in it: A still answers while its gates take minutes.
        served = httpx.get(f"{a.url}/control/status", headers={"Authorization": "Bearer adm-unused"}, timeout=10)
        assert served.status_code == 200 and served.json()[AGENT]["harness"]["active"] == active.id

        b = Replica(config, tmp_path / "home-b", gate_delay_s=0, log=tmp_path / "b.log").wait_ready()
        started.append(b)
        time.sleep(3)  # B ticks every second meanwhile, as a follower
        assert [d.id for d in journal.decisions(AGENT)] == [cut.id]  # nobody decided twice
        assert journal.decision(cut.id).state == DecisionState.proposed

        os.killpg(a.proc.pid, signal.SIGKILL)
        a.proc.wait(10)
        redone = wait_for(
            lambda: [d for d in journal.decisions(AGENT) if d.id != cut.id and d.state == DecisionState.canary],
            LEASE_S * 3,
            f"B to take over and finish the decision ({b.log_path})",
        )
        assert len(redone) == 1 and b.leads(redone[0])
        abandoned = journal.decision(cut.id)
        assert abandoned.state == DecisionState.failed
        assert str(b.proc.pid) in abandoned.gates["interrupted"] and str(a.proc.pid) in abandoned.gates["interrupted"]
        assert registry.get(redone[0].candidate_version).state == VersionState.canary
        if redone[0].candidate_version != cut.candidate_version:
            assert registry.get(cut.candidate_version).state == VersionState.candidate  # A's was never served
        assert len(journal.rollouts(AGENT)) == 1
        time.sleep(3)
        assert len(journal.decisions(AGENT)) == 2  # and B does not decide again while the canary runs
    finally:
        store.close()
