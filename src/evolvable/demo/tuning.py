"""The demo as a configuration: the embedded policy server, the support-desk workload, and control
settings scaled to the demo's traffic budget. `evolvable demo` builds its stack from this through the
same composition root as `evolvable serve` (evolvable.app), so what it measures is what `serve` runs.

Production defaults wait for hundreds of runs before acting; the demo has tens per round, so
thresholds are scaled to the round size: a decision after one round, a canary verdict within one.
The gates are not relaxed: the replay gate still needs a significant gain and the safety gate
still blocks any new probe failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolvable.app.config import EvolvableConfig, parse_config
from evolvable.control.models import Lever

if TYPE_CHECKING:
    from evolvable.demo.config import DemoConfig

POLICY_SERVER = "policy"


def demo_configuration(cfg: DemoConfig, harness_file: Path) -> EvolvableConfig:
    """What `evolvable.yaml` would say for the demo; `harness_file` holds the starting harness."""
    from evolvable.workloads.support_desk import AGENT_NAME

    n = cfg.round_size
    levers = sorted({*cfg.levers, Lever.rollback}, key=lambda lv: lv.value)
    data: dict[str, Any] = {
        "store": {"url": f"sqlite:///{cfg.report_dir / 'evolvable.db'}"},
        "proxy": {"spool_dir": str(cfg.report_dir / "spool"), "writer_mode": "thread"},
        "policy_servers": [{"name": POLICY_SERVER, "kind": "embedded", "model": cfg.model}],
        "agents": [
            {
                "name": AGENT_NAME,
                "policy": {"base_model": cfg.model, "upstream": POLICY_SERVER},
                "harness": str(harness_file),
                "workload": {
                    "entry_point": "support_desk",
                    "options": {
                        "seed": cfg.seed,
                        "gate_tasks": cfg.gate_tasks,
                        "safety_tasks": cfg.safety_tasks,
                        "concurrency": cfg.concurrency,
                        "max_turns": cfg.max_turns,
                        "max_tokens": cfg.max_tokens,
                        "explore_max_episodes": cfg.explore_max_episodes,
                    },
                },
            }
        ],
        "control": {
            "tick_interval_s": 0,  # the demo ticks between rounds
            "time_budget_s": 7200,  # exploration and training on a busy laptop: never cut a demo decision short
            "levers": [lv.value for lv in levers],
            "decision": {
                "min_runs": n,
                "min_cluster_runs": 1,
                "recurring_label_min": 2,
                "argument_error_min": 2,
                "weights_min_runs": 2 * n,
                "cooldown": 1,
            },
            "gates": {"alpha": 0.05},
            "canary": {"share": 0.5, "min_runs": max(2, n // 3)},
            "verdict_min_runs": max(2, n // 2),
            "memory": {"per_cluster": 2, "explore_tasks": cfg.explore_tasks},
            "weights": {
                "output_dir": str(cfg.report_dir / "adapters"),
                "overrides": {"epochs": 1, "ppo_epochs": 2, "micro_batch_size": 4, "grad_accum_steps": 2, "lr": 2e-4},
                # The demo's rounds are its clock: a round's tick trains and hands the adapter to the gates.
                "launcher": {"kind": "inline"},
            },
        },
    }
    return parse_config(data, source="the demo configuration")
