"""Weights: train a LoRA adapter on the agent's own traffic; publish the best snapshot only if it beats the served one.

With a `JobManager` (what `serve` configures) training is a background job and a tick never waits:
the first tick that picks the lever launches a job and records the decision as pending; later ticks
report its progress; the first tick after it ends gates its snapshots (`control/snapshot_gate.py`:
the best snapshot on validation tasks, no cluster collapsing, strictly better than the served policy),
publishes the chosen adapter (hot-loaded into every configured policy server) and hands it to the
gates and the canary as a candidate policy version. A failed job, a failed launch, a gate that keeps
the served policy, or a server that refuses the adapter each leave the served policy unchanged, and
the decision record says why.

Without a job manager (tests, the demo) the job runs inline in the tick, as before.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolvable.control.decision import Proposal
from evolvable.control.evolvers.base import EvolveContext, LeverPending, LeverUnavailable, PolicyCandidate
from evolvable.control.models import Lever, PolicySpec
from evolvable.control.snapshot_gate import SnapshotGateConfig, SnapshotVerdict, gate_snapshots

if TYPE_CHECKING:
    from evolvable.control.gates import TaskOutcome
    from evolvable.control.jobs import JobManager
    from evolvable.store.jobs import JobRecord

UNAVAILABLE = "weights lever unavailable: trainer not installed"
log = logging.getLogger(__name__)

__all__ = ["LeverPending", "WeightsEvolver"]


class WeightsEvolver:
    lever = Lever.weights

    def __init__(
        self,
        trainer: Any = None,
        *,
        servers: tuple[str, ...] = (),
        output_root: str | Path = ".evolvable/rl",
        config_overrides: dict[str, Any] | None = None,
        jobs: JobManager | None = None,
        gate: SnapshotGateConfig | None = None,
    ) -> None:
        self.trainer = trainer
        """Anything with `train(ctx, proposal) -> PolicyCandidate`; None uses the built-in trainer."""
        self.servers = servers
        """Policy servers (base URLs without /v1) that must hot-load the new adapter."""
        self.output_root = Path(output_root)
        self.config_overrides = config_overrides or {}
        self.jobs = jobs
        """Background training jobs; None trains inline in the tick."""
        self.gate = gate or SnapshotGateConfig()

    def propose(self, ctx: EvolveContext, proposal: Proposal) -> PolicyCandidate:
        if self.trainer is not None:
            return self.trainer.train(ctx, proposal)  # type: ignore[no-any-return]
        try:
            from evolvable.trainer.publish import publish  # noqa: F401 - is the trainer installed?
        except ImportError:
            raise LeverUnavailable(UNAVAILABLE) from None
        if self.jobs is not None:
            return self._via_job(ctx, self.jobs)
        return self._inline(ctx)

    # ------------------------------------------------------------------ background jobs

    def _via_job(self, ctx: EvolveContext, jobs: JobManager) -> PolicyCandidate:
        from evolvable.store.jobs import LIVE_STATES, JobState

        # Refreshing may end a job (its marker appeared): only those still live keep the decision pending.
        live = [j for j in jobs.refresh_live(agent=ctx.agent, tenant_id=_tenant(ctx)) if j.state in LIVE_STATES]
        if live:
            job = live[-1]
            step = job.progress.get("step")
            raise LeverPending(f"weights: training job {job.id} {job.state.value}" + (f", step {step}" if step else ""))
        ended = jobs.jobs.list(agent=ctx.agent, tenant_id=_tenant(ctx), states=(JobState.succeeded, JobState.failed))
        if ended:
            job = ended[-1]
            if not jobs.consume(job):
                raise LeverPending(f"weights: training job {job.id} is being published by another control replica")
            if job.state == JobState.failed:
                raise LeverUnavailable(f"weights: training job {job.id} failed: {job.error}")
            return self._publish_best(ctx, job)
        trajectories = [ctx.store.get_trajectory(r.trajectory_id) for r in ctx.runs]
        job = jobs.submit(
            agent=ctx.agent,
            config={"snapshot_interval": 1, **self._config(ctx)},
            trajectories=trajectories,
            tenant_id=_tenant(ctx),
            lineage={"window": _window(ctx), "policy_version": ctx.active_policy.id if ctx.active_policy else None},
        )
        if job.state == JobState.failed:
            raise LeverUnavailable(f"weights: cannot launch the training job: {job.error}")
        raise LeverPending(
            f"weights: training job {job.id} launched on {len(trajectories)} runs ({job.launcher}); "
            "a later tick gates its snapshots and publishes the best"
        )

    def _publish_best(self, ctx: EvolveContext, job: JobRecord) -> PolicyCandidate:
        result = job.result or {}
        if not result.get("adapter_dir"):
            raise LeverUnavailable(
                f"weights: training job {job.id} trained nothing ({result.get('sample_stats')}); "
                "trajectories need engine token ids"
            )
        snapshots = {int(step): path for step, path in (result.get("snapshots") or {}).items()}
        snapshots[int(result["optimizer_steps"])] = result["adapter_dir"]
        verdict = self._gate(ctx, job.id, snapshots, int(result["optimizer_steps"]))
        if verdict is not None and verdict.chosen_step is None:
            raise LeverUnavailable(f"weights: the snapshot gate kept the served policy: {verdict.reason}")
        chosen = (
            snapshots[verdict.chosen_step] if verdict is not None and verdict.chosen_step else result["adapter_dir"]
        )
        metrics = {**result.get("metrics", {}), "job": job.id}
        if verdict is not None:
            metrics["snapshot_gate"] = verdict.to_dict()
        return self._publish(
            ctx,
            adapter_dir=chosen,
            lora_name=f"{ctx.agent}-{job.id.removeprefix('job-')[:10]}",
            data={**result.get("data", {}), "job": job.id, "trajectory_ids": job.spec.get("trajectory_ids", [])},
            sample_stats=result.get("sample_stats", {}),
            config=result.get("config", {}),
            metrics=metrics,
        )

    def _gate(self, ctx: EvolveContext, job_id: str, snapshots: dict[int, str], last: int) -> SnapshotVerdict | None:
        """Run the snapshot gate on the agent's validation tasks; None when there is nothing to gate on
        (no replay suite or no server to load snapshots into: the final adapter goes on to the gates)."""
        suite = ctx.suite
        tasks = list(getattr(suite, "validation", ()) or getattr(suite, "holdout", ()) or ())
        if suite is None or not tasks or not self.servers:
            return None
        from evolvable.trainer.publish import load_lora

        base = ctx.active_policy.policy() if ctx.active_policy else PolicySpec(base_model=self._base_model(ctx))
        loaded: list[str] = []

        def evaluate(adapter: str | None) -> list[TaskOutcome]:
            policy = ctx.active_policy.policy() if ctx.active_policy else None
            if adapter is not None:
                step = next(s for s, path in snapshots.items() if path == adapter)
                name = f"{ctx.agent}-{job_id.removeprefix('job-')[:10]}-s{step}"
                loaded.append(name)
                for server in self.servers:
                    load_lora(server, name, str(Path(adapter).resolve()))
                policy = PolicySpec(base_model=base.base_model, lora_name=name, adapter_path=adapter)
            return list(suite.runner.run(ctx.active_harness, policy, tasks))

        try:
            return gate_snapshots(evaluate, snapshots, last, self.gate)
        except Exception as err:
            raise LeverUnavailable(f"weights: the snapshot gate could not run: {type(err).__name__}: {err}") from err
        finally:
            self._unload(loaded)

    def _unload(self, names: list[str]) -> None:
        """Snapshots were loaded only to be validated: free the servers' memory (best effort, logged)."""
        from evolvable.trainer.publish import unload_lora

        for name in names:
            for server in self.servers:
                try:
                    unload_lora(server, name)
                except Exception as err:  # a server that keeps an unused adapter still serves correctly
                    log.warning("could not unload snapshot adapter %s from %s: %s", name, server, err)

    # ------------------------------------------------------------------ inline (no job manager)

    def _inline(self, ctx: EvolveContext) -> PolicyCandidate:
        from evolvable.store import TrajectoryFilter
        from evolvable.trainer.config import RLConfig
        from evolvable.trainer.loop import run_training_job
        from evolvable.trainer.samples import StoreSource

        run_dir = self.output_root / f"{ctx.agent}-{time.strftime('%Y%m%d-%H%M%S')}"
        config = RLConfig(**self._config(ctx), output_dir=str(run_dir))
        url = ctx.store.engine.url.render_as_string(hide_password=False)
        source = StoreSource(url=url, filter=TrajectoryFilter(ids=[r.trajectory_id for r in ctx.runs]))
        try:
            result = run_training_job(config, source)
        except Exception as err:  # a failed job is recorded on the decision, not raised
            raise LeverUnavailable(f"weights lever: training failed: {type(err).__name__}: {err}") from err
        if result.adapter_dir is None:
            raise LeverUnavailable(
                f"weights lever: no trainable samples ({result.sample_stats}); trajectories need engine token ids"
            )
        return self._publish(
            ctx,
            adapter_dir=result.adapter_dir,
            lora_name=Path(config.output_dir).name,
            data=result.data,
            sample_stats=result.sample_stats,
            config=result.config,
            metrics=result.metrics,
        )

    # ------------------------------------------------------------------ shared

    def _base_model(self, ctx: EvolveContext) -> str:
        return ctx.active_policy.policy().base_model if ctx.active_policy else "smollm2-135m"

    def _config(self, ctx: EvolveContext) -> dict[str, Any]:
        """The job's RLConfig fields. Staleness is on: the policy versions come from the registry's lineage."""
        base = ctx.active_policy.policy() if ctx.active_policy else PolicySpec(base_model=self._base_model(ctx))
        versions: list[str] = []
        if ctx.active_policy is not None:
            from evolvable.control.policies import version_chain
            from evolvable.control.registry import Registry

            versions = version_chain(Registry(ctx.store.engine), ctx.active_policy.id)
        config: dict[str, Any] = {
            "base_model": base.base_model,
            "init_adapter": base.adapter_path,
            "harness_version": ctx.active_harness_version,
            "allow_other_harness": True,
            "progress": False,
            "policy_versions": versions,
        }
        return {**config, **self.config_overrides}

    def _publish(
        self,
        ctx: EvolveContext,
        *,
        adapter_dir: str,
        lora_name: str,
        data: dict[str, Any],
        sample_stats: dict[str, Any],
        config: dict[str, Any],
        metrics: dict[str, Any],
    ) -> PolicyCandidate:
        from evolvable.trainer.publish import PublishedAdapter, publish

        base = self._base_model(ctx)
        manifest = PublishedAdapter(
            lora_name=lora_name,
            adapter_path=adapter_dir,
            base_model=base,
            agent=ctx.agent,
            parent_policy_version=ctx.active_policy.id if ctx.active_policy else None,
            data={**data, "sample_stats": sample_stats},
            config=config,
            metrics=metrics,
        )
        try:
            publish(adapter_dir, manifest, servers=list(self.servers))
        except Exception as err:
            raise LeverUnavailable(f"weights lever: adapter trained but not loadable: {err}") from err
        return PolicyCandidate(
            spec=PolicySpec(base_model=base, lora_name=lora_name, adapter_path=str(Path(adapter_dir).resolve())),
            note=f"weights: LoRA trained on {sample_stats.get('samples', '?')} samples",
            data_snapshot=json.dumps(data, sort_keys=True, default=str),
            config=config,
            metrics=metrics,
        )


def _tenant(ctx: EvolveContext) -> str | None:
    """The tenant the context is scoped to (control contexts gain a tenant with per-tenant control)."""
    return getattr(ctx, "tenant", None)


def _window(ctx: EvolveContext) -> dict[str, str | None]:
    """The time window of the runs a job trains on (erasure checks which adapters a purge reaches)."""
    started = sorted(r.started_at for r in ctx.runs)
    return {"from": started[0].isoformat() if started else None, "to": started[-1].isoformat() if started else None}
