"""Training jobs: launched as real separate processes (accelerate launch, 2 processes; a command
template), tracked in the store, never waited on, resumed or failed with the reason after a crash."""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from pathlib import Path

import pytest

from evolvable.control.jobs import CommandLauncher, JobManager, LaunchFailed, LocalLauncher
from evolvable.protocol.models import Trajectory
from evolvable.store import Store
from evolvable.store.jobs import JobState, TrainingJobs

TINY = {
    "base_model": "tiny-random-llama",
    "lora_r": 4,
    "lora_alpha": 8,
    "lora_targets": ["q_proj", "v_proj"],
    "rollout_batch_size": 4,
    "micro_batch_size": 2,
    "grad_accum_steps": 1,
    "snapshot_interval": 1,
}
ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(
    [str(Path(__file__).resolve().parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}  # fmt: skip


def wait_until_done(manager: JobManager, job_id: str, timeout_s: float = 300.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = manager.refresh(manager.jobs.get(job_id))
        if record.state not in (JobState.queued, JobState.running):
            return record
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {record.state} after {timeout_s} s")


@pytest.fixture
def jobs(tmp_path: Path) -> TrainingJobs:
    return TrainingJobs(Store.open(f"sqlite:///{tmp_path / 'store.db'}").engine)


def test_job_records_on_both_backends(db_url: str) -> None:
    repo = TrainingJobs(Store.open(db_url).engine)
    record = repo.create(agent="a", launcher="local", output_dir="/x", spec={"k": 1}, tenant_id="t1")
    assert repo.get(record.id).state == JobState.queued
    assert repo.update(record.id, expect=(JobState.queued,), state=JobState.running, handle="42")
    assert not repo.update(record.id, expect=(JobState.queued,), state=JobState.failed)  # compare-and-set
    assert [r.id for r in repo.list(agent="a", tenant_id="t1", states=(JobState.running,))] == [record.id]
    assert repo.list(tenant_id="t2") == []


def test_accelerate_launch_with_two_processes_trains_and_reports(
    tmp_path: Path, jobs: TrainingJobs, synthetic_set: list[Trajectory]
) -> None:
    manager = JobManager(jobs, LocalLauncher(num_processes=2, env=ENV), tmp_path / "jobs")
    started = time.monotonic()
    record = manager.submit(agent="a", config=TINY, trajectories=synthetic_set[:8], tenant_id="t1", decision_id="d1")
    assert time.monotonic() - started < 30  # submit returns while the job runs (never waits for training)
    assert record.state == JobState.running and record.handle and record.spec["trajectory_ids"]
    done = wait_until_done(manager, record.id)
    assert done.state == JobState.succeeded, (done.error, (Path(done.output_dir) / "job.log").read_text()[-2000:])
    ranks = sorted((Path(done.output_dir) / "run" / "ranks").glob("rank-*.json"))
    assert [json.loads(p.read_text())["world_size"] for p in ranks] == [2, 2]  # two real processes
    assert Path(done.result["adapter_dir"]).is_dir() and done.result["snapshots"]
    assert done.progress["step"] == done.result["optimizer_steps"] and "loss" in done.progress
    assert manager.consume(done) and not manager.consume(done)  # exactly once across replicas


def test_a_crashing_job_is_failed_with_its_error(
    tmp_path: Path, jobs: TrainingJobs, synthetic_set: list[Trajectory]
) -> None:
    manager = JobManager(jobs, LocalLauncher(tool="python", env=ENV), tmp_path / "jobs")
    config = {**TINY, "base_model": str(tmp_path / "no-such-model")}
    record = manager.submit(agent="a", config=config, trajectories=synthetic_set[:4])
    done = wait_until_done(manager, record.id, 120)
    assert done.state == JobState.failed and "no-such-model" in done.error


def test_a_killed_job_without_checkpoint_fails_with_the_log_tail(
    tmp_path: Path, jobs: TrainingJobs, synthetic_set: list[Trajectory]
) -> None:
    manager = JobManager(jobs, LocalLauncher(tool="python", env=ENV), tmp_path / "jobs")
    record = manager.submit(agent="a", config=TINY, trajectories=synthetic_set)
    os.killpg(int(record.handle), signal.SIGKILL)
    done = wait_until_done(manager, record.id, 60)
    assert done.state == JobState.failed and "exited without a result" in done.error


def test_a_job_survives_a_new_manager_and_is_resumed_after_its_process_died(
    tmp_path: Path, jobs: TrainingJobs, synthetic_set: list[Trajectory]
) -> None:
    """A restarted `serve` (a new manager on the same store) re-attaches; a dead job with a checkpoint resumes."""
    # 64 iterations, a checkpoint after each: the job is still running well after its first one (with 8, a fast
    # machine once finished the job between the first checkpoint and the kill)
    config = {**TINY, "checkpoint_interval": 1, "rollout_batch_size": 2, "micro_batch_size": 1, "epochs": 8}
    manager = JobManager(jobs, LocalLauncher(tool="python", env=ENV), tmp_path / "jobs")
    record = manager.submit(agent="a", config=config, trajectories=synthetic_set)
    run_dir = Path(record.output_dir) / "run"
    deadline = time.monotonic() + 240
    while not (run_dir / "checkpoints").is_dir() or not any((run_dir / "checkpoints").glob("iter_*/COMPLETE")):
        assert time.monotonic() < deadline, (Path(record.output_dir) / "job.log").read_text()[-2000:]
        assert not (run_dir / "result.json").exists(), "the job finished before a checkpoint could be interrupted"
        time.sleep(0.05)
    os.killpg(int(record.handle), signal.SIGKILL)
    assert not (run_dir / "result.json").exists(), "the job finished before it was killed"
    restarted = JobManager(TrainingJobs(jobs.engine), LocalLauncher(tool="python", env=ENV), tmp_path / "jobs")
    done = wait_until_done(restarted, record.id)
    assert done.state == JobState.succeeded and done.attempts == 2, done.error
    assert done.result["resumed_from"]


def test_command_template_launcher(tmp_path: Path, jobs: TrainingJobs, synthetic_set: list[Trajectory]) -> None:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in ENV.items())
    # What a scheduler's submit command does: start the job elsewhere and print its id.
    launcher = CommandLauncher(f"env {env} {{command}} > {{log}} 2>&1 & echo $!")
    manager = JobManager(jobs, launcher, tmp_path / "jobs")
    record = manager.submit(agent="a", config=TINY, trajectories=synthetic_set[:4])
    assert record.state == JobState.running and record.handle.isdigit()
    done = wait_until_done(manager, record.id)
    assert done.state == JobState.succeeded, done.error


def test_a_failing_launcher_command_leaves_a_failed_job(tmp_path: Path, jobs: TrainingJobs) -> None:
    manager = JobManager(jobs, CommandLauncher("echo 'sbatch: error: invalid partition' >&2; exit 1"), tmp_path)
    record = manager.submit(agent="a", config=TINY, trajectories=[])
    assert record.state == JobState.failed and "invalid partition" in record.error


def test_unknown_local_tool_is_a_launch_failure() -> None:
    with pytest.raises(LaunchFailed, match="unknown local launcher tool"):
        LocalLauncher(num_processes=2, tool="mpirun").command([])
