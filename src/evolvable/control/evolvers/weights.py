"""Weights: hand a training job to the trainer and return its adapter as a candidate policy version.

The built-in path calls `evolvable.trainer.loop.run_training_job` on the agent's recent trajectories
(store filter by id, so the data lineage is exact), then `publish` writes the adapter manifest and
hot-loads it into the configured policy servers. Whatever cannot run here (no trainer or torch
installed, no trajectories with engine token ids) raises `LeverUnavailable` with the reason, which
the decision record shows verbatim.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from evolvable.control.decision import Proposal
from evolvable.control.evolvers import EvolveContext, LeverUnavailable, PolicyCandidate
from evolvable.control.models import Lever, PolicySpec

UNAVAILABLE = "weights lever unavailable: trainer not installed"


class WeightsEvolver:
    lever = Lever.weights

    def __init__(
        self,
        trainer: Any = None,
        *,
        servers: tuple[str, ...] = (),
        output_root: str | Path = ".evolvable/rl",
        config_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.trainer = trainer
        """Anything with `train(ctx, proposal) -> PolicyCandidate`; None uses the built-in trainer."""
        self.servers = servers
        """Policy servers (base URLs without /v1) that must hot-load the new adapter."""
        self.output_root = Path(output_root)
        self.config_overrides = config_overrides or {}

    def propose(self, ctx: EvolveContext, proposal: Proposal) -> PolicyCandidate:
        if self.trainer is not None:
            return self.trainer.train(ctx, proposal)
        try:
            from evolvable.trainer.config import RLConfig
            from evolvable.trainer.loop import run_training_job
            from evolvable.trainer.publish import PublishedAdapter, publish
            from evolvable.trainer.samples import StoreSource
        except ImportError:
            raise LeverUnavailable(UNAVAILABLE) from None
        from evolvable.store import TrajectoryFilter

        base = ctx.active_policy.policy() if ctx.active_policy else PolicySpec(base_model="smollm2-135m")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        config = RLConfig(
            base_model=base.base_model,
            init_adapter=base.adapter_path,
            output_dir=str(self.output_root / f"{ctx.agent}-{stamp}"),
            harness_version=ctx.active_harness_version,
            allow_other_harness=True,
            progress=False,
            **self.config_overrides,
        )
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
        lora_name = f"{ctx.agent}-{stamp}"
        manifest = PublishedAdapter(
            lora_name=lora_name,
            adapter_path=result.adapter_dir,
            base_model=base.base_model,
            agent=ctx.agent,
            parent_policy_version=ctx.active_policy.id if ctx.active_policy else None,
            data={**result.data, "sample_stats": result.sample_stats},
            config=result.config,
            metrics=result.metrics,
        )
        try:
            publish(result.adapter_dir, manifest, servers=list(self.servers))
        except Exception as err:
            raise LeverUnavailable(f"weights lever: adapter trained but not loadable: {err}") from err
        return PolicyCandidate(
            spec=PolicySpec(base_model=base.base_model, lora_name=lora_name, adapter_path=result.adapter_dir),
            note=f"weights: LoRA trained on {result.sample_stats.get('samples', '?')} samples",
            data_snapshot=str(result.data),
            config=result.config,
            metrics=result.metrics,
        )
