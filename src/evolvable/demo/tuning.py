"""Control-plane settings scaled to the demo's traffic budget.

Production defaults wait for hundreds of runs before acting; the demo has tens per round, so
thresholds are scaled to the round size: a decision after one round, a canary verdict within one.
The gates are not relaxed: the replay gate still needs a significant gain and the safety gate
still blocks any new probe failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evolvable.control.decision import DecisionConfig
from evolvable.control.gates import GateConfig
from evolvable.control.models import Lever
from evolvable.control.rollout import CanaryConfig
from evolvable.control.runtime import ControlConfig

if TYPE_CHECKING:
    from evolvable.demo.run import DemoConfig


def control_config(cfg: DemoConfig) -> ControlConfig:
    n = cfg.round_size
    return ControlConfig(
        decision=DecisionConfig(
            levers=cfg.levers | {Lever.rollback},
            min_runs=n,
            min_cluster_runs=1,
            recurring_label_min=2,
            argument_error_min=2,
            weights_min_runs=2 * n,
            cooldown=1,
        ),
        gates=GateConfig(alpha=0.05),
        canary=CanaryConfig(share=0.5, min_runs=max(2, n // 3)),
        verdict_min_runs=max(2, n // 2),
    )


def evolvers(cfg: DemoConfig, endpoint: str) -> dict[Lever, Any]:
    """The default evolvers; the weights lever trains small LoRA jobs and hot-loads them into the server."""
    from evolvable.control.evolvers import default_evolvers
    from evolvable.control.evolvers.weights import WeightsEvolver

    server = endpoint.removesuffix("/v1")
    out = default_evolvers(policy_servers=(server,))
    out[Lever.weights] = WeightsEvolver(
        servers=(server,),
        output_root=cfg.report_dir / "adapters",
        config_overrides={"epochs": 1, "ppo_epochs": 2, "micro_batch_size": 4, "grad_accum_steps": 2, "lr": 2e-4},
    )
    return out
