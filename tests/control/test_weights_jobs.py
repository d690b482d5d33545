"""The weights lever in production: a background training job (a real separate process), its snapshots
gated on validation tasks, the chosen adapter hot-loaded; every failure leaves the served policy."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.lora_server import LoraServerState, fake_lora_server
from tests.trainer.conftest import make_trajectory

from evolvable.control.decision import Proposal
from evolvable.control.evolvers import EvolveContext, LeverUnavailable
from evolvable.control.evolvers.weights import LeverPending, WeightsEvolver
from evolvable.control.gates import ReplaySuite, TaskOutcome
from evolvable.control.jobs import CommandLauncher, JobManager, LocalLauncher
from evolvable.control.models import Lever, PolicySpec
from evolvable.control.statistics import compute_statistics, load_runs
from evolvable.protocol.harness import Harness
from evolvable.store import Store
from evolvable.store.jobs import JobState, TrainingJobs

AGENT = "rl-agent"
TINY = {
    "base_model": "tiny-random-llama",
    "lora_r": 4,
    "lora_alpha": 8,
    "lora_targets": ["q_proj", "v_proj"],
    "rollout_batch_size": 4,
    "micro_batch_size": 2,
    "grad_accum_steps": 1,
}
ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(
    [str(Path(__file__).resolve().parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
PROPOSAL = Proposal(Lever.weights, "volume", "enough recorded traffic since the last weight update")


class ScoredRunner:
    """Validation outcomes by served model: the served policy solves `base`, snapshot step s solves `by_step(s)`."""

    def __init__(self, base: int, by_step) -> None:
        self.base, self.by_step, self.calls = base, by_step, []

    def run(self, harness: Harness, policy: PolicySpec | None, tasks) -> list[TaskOutcome]:
        self.calls.append(policy.lora_name if policy else None)
        solved = self.base if policy is None else self.by_step(int(policy.lora_name.rsplit("-s", 1)[1]))
        return [TaskOutcome(t, "c", success=i < solved) for i, t in enumerate(tasks)]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    rng = random.Random(3)
    for i in range(12):
        t = make_trajectory(rng, turns=1 + i % 2, outcome=float(i % 3 == 0), cluster="c")
        store.put_trajectory(t.model_copy(update={"agent": AGENT}))
    return store


@pytest.fixture
def lora() -> Iterator[LoraServerState]:
    with fake_lora_server() as server:
        yield server


def context(store: Store, suite: ReplaySuite | None) -> EvolveContext:
    runs = load_runs(store, AGENT)
    harness = Harness(agent=AGENT, system_prompt="help")
    return EvolveContext(
        AGENT, store, harness, harness.content_hash(), runs, compute_statistics(AGENT, runs), suite=suite
    )


def evolver(store: Store, tmp_path: Path, servers: tuple[str, ...], launcher=None) -> WeightsEvolver:
    jobs = JobManager(TrainingJobs(store.engine), launcher or LocalLauncher(tool="python", env=ENV), tmp_path / "jobs")
    return WeightsEvolver(servers=servers, jobs=jobs, config_overrides=TINY)


def finish(evolver: WeightsEvolver, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while evolver.jobs.refresh_live(agent=AGENT):
        assert time.monotonic() < deadline, "training job did not end"
        time.sleep(0.5)


def test_a_tick_never_waits_and_the_best_gated_snapshot_is_published(store, tmp_path, lora) -> None:
    runner = ScoredRunner(base=1, by_step=lambda s: 1 + s)  # later snapshots are better
    weights = evolver(store, tmp_path, (lora.url,))
    ctx = context(store, ReplaySuite(runner, holdout=[f"v{i}" for i in range(8)]))
    started = time.monotonic()
    with pytest.raises(LeverPending, match="launched on 12 runs"):
        weights.propose(ctx, PROPOSAL)
    assert time.monotonic() - started < 20  # the tick returned while the job trains
    [job] = weights.jobs.jobs.list(agent=AGENT)
    assert job.spec["trajectory_ids"] and job.spec["window"]["from"]
    finish(weights)
    candidate = weights.propose(ctx, PROPOSAL)
    gate = candidate.metrics["snapshot_gate"]
    last = max(int(s) for s in gate["candidates"])
    assert gate["chosen_step"] == last and gate["base_solved"] == 1
    assert runner.calls[0] is None and len(runner.calls) == 1 + len(gate["candidates"])
    loaded = [body["lora_name"] for path, body in lora.received if path.endswith("/load_lora_adapter")]
    unloaded = [body["lora_name"] for path, body in lora.received if path.endswith("/unload_lora_adapter")]
    assert candidate.spec.lora_name == loaded[-1]  # published last
    assert sorted(unloaded) == sorted(loaded[:-1])  # every snapshot loaded for validation is unloaded again
    assert weights.jobs.jobs.get(job.id).state == JobState.consumed
    assert "job" in candidate.data_snapshot and candidate.metrics["job"] == job.id


def test_the_gate_keeps_the_served_policy_when_no_snapshot_beats_it(store, tmp_path, lora) -> None:
    weights = evolver(store, tmp_path, (lora.url,))
    ctx = context(store, ReplaySuite(ScoredRunner(base=4, by_step=lambda s: 4), holdout=[f"v{i}" for i in range(8)]))
    with pytest.raises(LeverPending):
        weights.propose(ctx, PROPOSAL)
    finish(weights)
    with pytest.raises(LeverUnavailable, match="snapshot gate kept the served policy"):
        weights.propose(ctx, PROPOSAL)
    published = [b for p, b in lora.received if not b["lora_name"].rsplit("-s", 1)[-1].isdigit()]
    assert published == []  # only snapshots were loaded (and unloaded); nothing was published


def test_a_crashed_job_and_a_failing_launcher_are_recorded_reasons(store, tmp_path, lora) -> None:
    weights = evolver(store, tmp_path, (lora.url,))
    weights.config_overrides = {**TINY, "base_model": str(tmp_path / "missing-model")}
    ctx = context(store, None)
    with pytest.raises(LeverPending):
        weights.propose(ctx, PROPOSAL)
    finish(weights)
    with pytest.raises(LeverUnavailable, match=r"training job job-\w+ failed: .*missing-model"):
        weights.propose(ctx, PROPOSAL)
    refusing = evolver(store, tmp_path / "b", (lora.url,), CommandLauncher("echo 'queue closed' >&2; exit 3"))
    with pytest.raises(LeverUnavailable, match=r"cannot launch the training job: .*queue closed") as err:
        refusing.propose(ctx, PROPOSAL)
    assert not isinstance(err.value, LeverPending)


def test_a_server_that_refuses_the_adapter_leaves_the_policy(store, tmp_path, lora) -> None:
    weights = evolver(store, tmp_path, (lora.url,))
    ctx = context(store, None)  # no suite: nothing to gate on, the final adapter goes to the gates
    with pytest.raises(LeverPending):
        weights.propose(ctx, PROPOSAL)
    finish(weights)
    lora.refuse = True
    with pytest.raises(LeverUnavailable, match="not loadable"):
        weights.propose(ctx, PROPOSAL)
