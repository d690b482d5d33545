"""Training is a job: launched through a configured launcher, tracked in the store, never waited on.

A control tick submits a job and returns; later ticks `refresh` it from what the job leaves in its
directory (`metrics.jsonl` for progress, `result.json` or `error.json` when it ends — see
`trainer.loop.main`). Because the state is in the store and the outcome in files, a job survives a
restart of `serve`: the new process re-attaches by the launcher's handle, resumes a job whose process
died from its accelerate checkpoint (up to `max_attempts`), or marks it failed with the reason.

Launchers:
- `LocalLauncher`: `accelerate launch` (or `torchrun`, or plain Python for one process) as a detached
  subprocess on this machine.
- `CommandLauncher`: a command template for the engine a team already runs — Slurm `sbatch`, a
  Kubernetes Job, `ray job submit` — filled with the trainer command; the job directory must be on a
  filesystem both sides see.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evolvable.errors import ControlError
from evolvable.protocol.models import Trajectory
from evolvable.store.jobs import LIVE_STATES, JobRecord, JobState, TrainingJobs
from evolvable.trainer.loop import ERROR_MARKER, RESULT_MARKER, completed_checkpoints

TRAINER_MODULE = "evolvable.trainer.loop"
LOG_FILE = "job.log"


class LaunchFailed(ControlError):
    """The launcher could not start the job (its command failed or is missing)."""


def trainer_args(job_dir: Path, *, resume: bool) -> list[str]:
    """Arguments of `python -m evolvable.trainer.loop` for a job directory the manager prepared."""
    args = ["--config", str(job_dir / "config.json"), "--output-dir", str(job_dir / "run")]
    return [*args, "--resume"] if resume else [*args, "--from-file", str(job_dir / "trajectories.jsonl")]


class Launcher(Protocol):
    name: str

    def start(self, job_dir: Path, args: list[str]) -> str:
        """Start the trainer with `args`; return a handle to find the job again. Raises LaunchFailed."""
        ...

    def alive(self, handle: str) -> bool | None:
        """Whether the job's process still runs; None when this launcher cannot tell (then only the
        job's marker files say that it ended)."""
        ...

    def cancel(self, handle: str) -> None: ...


@dataclass
class LocalLauncher:
    """The trainer as a detached process group on this machine (it outlives a restart of `serve`)."""

    num_processes: int = 1
    tool: str = "accelerate"
    """`accelerate` (accelerate launch), `torchrun`, or `python` (one process, no launcher)."""
    extra_args: list[str] = field(default_factory=list)
    env: Mapping[str, str] = field(default_factory=dict)
    name: str = "local"

    def command(self, args: list[str]) -> list[str]:
        python = sys.executable
        if self.tool == "python" or (self.num_processes == 1 and self.tool != "accelerate"):
            return [python, "-m", TRAINER_MODULE, *args]
        if self.tool == "torchrun":
            return [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                    str(self.num_processes), *self.extra_args, "-m", TRAINER_MODULE, *args]  # fmt: skip
        if self.tool != "accelerate":
            raise LaunchFailed(f"unknown local launcher tool {self.tool!r} (accelerate, torchrun or python)")
        # --multi_gpu is accelerate's multi-process mode; on a machine without CUDA it runs MULTI_CPU.
        multi = ["--multi_gpu"] if self.num_processes > 1 else []
        return [python, "-m", "accelerate.commands.accelerate_cli", "launch", *multi,
                "--num_processes", str(self.num_processes), "--num_machines", "1", "--mixed_precision", "no",
                "--dynamo_backend", "no", *self.extra_args, "-m", TRAINER_MODULE, *args]  # fmt: skip

    def start(self, job_dir: Path, args: list[str]) -> str:
        command = self.command(args)
        env = {**os.environ, **self.env}
        if self.num_processes > _visible_gpus(env):
            # More processes than GPUs: they train on the CPU, and CUDA hidden keeps each of them from
            # claiming a GPU ordinal that does not exist ("invalid device ordinal").
            env["CUDA_VISIBLE_DEVICES"] = ""
        try:
            with (job_dir / LOG_FILE).open("ab") as log:
                process = subprocess.Popen(
                    command, cwd=job_dir, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )
        except OSError as err:
            raise LaunchFailed(f"cannot start {command[0]}: {err}") from err
        _CHILDREN[process.pid] = process
        return str(process.pid)

    def alive(self, handle: str) -> bool | None:
        pid = int(handle)
        child = _CHILDREN.get(pid)
        if child is not None:  # ours: poll reaps it, so an ended child is never mistaken for a live zombie
            return child.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def cancel(self, handle: str) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(handle), signal.SIGTERM)


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
"""Processes this process started, so their exit is reaped."""


@dataclass
class CommandLauncher:
    """A command template for an external scheduler. Placeholders: {command} (the trainer command,
    shell-quoted), {job_dir}, {log}, {num_processes}. Its first output line is the job's handle
    (e.g. `sbatch --parsable`); `cancel_template` may use {handle}."""

    template: str
    num_processes: int = 1
    cancel_template: str | None = None
    timeout_s: float = 120.0
    name: str = "command"

    def start(self, job_dir: Path, args: list[str]) -> str:
        inner = LocalLauncher(self.num_processes).command(args)
        command = self.template.format(
            command=shlex.join(inner),
            job_dir=shlex.quote(str(job_dir)),
            log=shlex.quote(str(job_dir / LOG_FILE)),
            num_processes=self.num_processes,
        )
        try:
            done = subprocess.run(
                command, shell=True, cwd=job_dir, capture_output=True, text=True, timeout=self.timeout_s
            )
        except subprocess.TimeoutExpired:
            raise LaunchFailed(f"launcher command timed out after {self.timeout_s:.0f} s: {command}") from None
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip()[-500:]
            raise LaunchFailed(f"launcher command exited {done.returncode}: {detail or command}")
        lines = done.stdout.strip().splitlines()
        return lines[0].strip() if lines else "submitted"

    def alive(self, handle: str) -> bool | None:
        return None

    def cancel(self, handle: str) -> None:
        if self.cancel_template:
            subprocess.run(self.cancel_template.format(handle=shlex.quote(handle)), shell=True, check=False)


@dataclass
class JobManager:
    """Submits training jobs and keeps their records true to what the jobs did."""

    jobs: TrainingJobs
    launcher: Launcher
    root: Path
    max_attempts: int = 2
    """A job whose process died without a marker is resumed from its checkpoint until this many tries."""

    def submit(
        self,
        *,
        agent: str,
        config: Mapping[str, Any],
        trajectories: Iterable[Trajectory],
        tenant_id: str | None = None,
        decision_id: str | None = None,
        lineage: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        """Write the job's inputs, record it, launch it. A launch failure leaves a `failed` record."""
        record = self.jobs.create(
            agent=agent,
            launcher=self.launcher.name,
            output_dir="",
            spec={},
            tenant_id=tenant_id,
            decision_id=decision_id,
        )
        job_dir = (self.root / record.id).resolve()
        job_dir.mkdir(parents=True, exist_ok=True)
        ids = []
        with (job_dir / "trajectories.jsonl").open("w") as handle:
            for trajectory in trajectories:
                handle.write(trajectory.model_dump_json() + "\n")
                ids.append(trajectory.id)
        run_config = {**config, "output_dir": str(job_dir / "run"), "progress": False}
        (job_dir / "config.json").write_text(json.dumps(run_config, indent=2, default=str))
        spec = {"config": run_config, "trajectory_ids": ids, **(lineage or {})}
        self.jobs.update(record.id, output_dir=str(job_dir), spec=spec)
        try:
            handle_id = self.launcher.start(job_dir, trainer_args(job_dir, resume=False))
        except LaunchFailed as err:
            self.jobs.update(record.id, state=JobState.failed, error=str(err))
            return self.jobs.get(record.id)
        self.jobs.update(record.id, state=JobState.running, handle=handle_id)
        return self.jobs.get(record.id)

    def refresh(self, record: JobRecord) -> JobRecord:
        """Bring a live job's record up to date: progress, or how it ended."""
        if record.state not in LIVE_STATES:
            return record
        run_dir = Path(record.output_dir) / "run"
        if (run_dir / RESULT_MARKER).is_file():
            result = json.loads((run_dir / RESULT_MARKER).read_text())
            self.jobs.update(
                record.id, expect=LIVE_STATES, state=JobState.succeeded, result=result, progress=_progress(run_dir)
            )
        elif (run_dir / ERROR_MARKER).is_file():
            error = json.loads((run_dir / ERROR_MARKER).read_text()).get("error", "the job reported an error")
            self.jobs.update(record.id, expect=LIVE_STATES, state=JobState.failed, error=error)
        elif record.handle and self.launcher.alive(record.handle) is False:
            self._died(record, run_dir)
        else:
            self.jobs.update(record.id, expect=LIVE_STATES, progress=_progress(run_dir))
        return self.jobs.get(record.id)

    def refresh_live(self, agent: str | None = None, tenant_id: str | None = None) -> list[JobRecord]:
        return [self.refresh(r) for r in self.jobs.list(agent=agent, tenant_id=tenant_id, states=LIVE_STATES)]

    def _died(self, record: JobRecord, run_dir: Path) -> None:
        """The process is gone and left no marker: resume from a checkpoint, or fail with the log's tail."""
        job_dir = Path(record.output_dir)
        can_resume = bool(completed_checkpoints(run_dir)) and (run_dir / "samples.jsonl").is_file()
        if can_resume and record.attempts < self.max_attempts:
            try:
                handle = self.launcher.start(job_dir, trainer_args(job_dir, resume=True))
            except LaunchFailed as err:
                self.jobs.update(record.id, expect=LIVE_STATES, state=JobState.failed, error=str(err))
                return
            self.jobs.update(record.id, expect=LIVE_STATES, handle=handle, attempts=record.attempts + 1)
            return
        tail = _log_tail(job_dir / LOG_FILE)
        reason = f"the job's process exited without a result (attempt {record.attempts}); log tail: {tail}"
        self.jobs.update(record.id, expect=LIVE_STATES, state=JobState.failed, error=reason)

    def consume(self, record: JobRecord) -> bool:
        """Claim a finished job's outcome exactly once (compare-and-set across control replicas)."""
        return self.jobs.update(record.id, expect=(JobState.succeeded, JobState.failed), state=JobState.consumed)


def _progress(run_dir: Path) -> dict[str, Any]:
    """The last line the trainer appended to metrics.jsonl (step, loss, KL, tokens/s)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return {}
    last = b""
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                last = line
    try:
        return dict(json.loads(last)) if last else {}
    except ValueError:
        return {}


def _log_tail(path: Path, limit: int = 600) -> str:
    try:
        text = path.read_bytes()[-4096:].decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-4:])[-limit:] or "(empty log)"


def _visible_gpus(env: Mapping[str, str]) -> int:
    """CUDA devices a launched process would see (0 without torch or a GPU); asks the driver, never CUDA."""
    if env.get("CUDA_VISIBLE_DEVICES") == "":
        return 0
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count())
