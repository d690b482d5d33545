"""Control-plane settings scaled to the demo's traffic budget.

Production defaults wait for hundreds of runs before acting; the demo has tens per round, so
thresholds are scaled to the round size: a decision after one round, a canary verdict within one.
The gates are not relaxed: the replay gate still needs a significant gain and the safety gate
still blocks any new probe failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evolvable.control.decision import DecisionConfig
from evolvable.control.gates import GateConfig
from evolvable.control.models import Lever
from evolvable.control.rollout import CanaryConfig
from evolvable.control.runtime import ControlConfig

if TYPE_CHECKING:
    from evolvable.demo.run import DemoConfig
    from evolvable.protocol.harness import MemoryExemplar


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
    from evolvable.control.evolvers.memory import MemoryEvolver
    from evolvable.control.evolvers.weights import WeightsEvolver

    server = endpoint.removesuffix("/v1")
    out = default_evolvers(policy_servers=(server,))
    out[Lever.memory] = MemoryEvolver(per_cluster=2, explore_tasks=cfg.explore_tasks)
    out[Lever.weights] = WeightsEvolver(
        servers=(server,),
        output_root=cfg.report_dir / "adapters",
        config_overrides={"epochs": 1, "ppo_epochs": 2, "micro_batch_size": 4, "grad_accum_steps": 2, "lr": 2e-4},
    )
    return out


def exemplar_redactor() -> Callable[[MemoryExemplar], MemoryExemplar]:
    """Explored exemplars are shown to the model while it serves other customers and stored in the
    registry: they pass through the same redaction as recorded traffic (one placeholder map each)."""
    from evolvable.governance.redaction import PlaceholderMap, RedactionEngine

    engine = RedactionEngine()

    def redact(exemplar: MemoryExemplar) -> MemoryExemplar:
        placeholders = PlaceholderMap()

        def clean(text: str) -> str:
            return engine.redact(text, placeholders).text

        return exemplar.model_copy(
            update={
                "task_input": clean(exemplar.task_input),
                "messages": [m.model_copy(update={"content": clean(m.text())}) for m in exemplar.messages],
            }
        )

    return redact
