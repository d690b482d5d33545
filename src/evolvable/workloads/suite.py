"""What the built-in workloads share: a suite is a runner plus generated held-out and safety tasks.

A workload module builds its runner from the configuration's workload options and names its task
generator; `TaskSuiteWorkload` does the rest the same way for every one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evolvable.control.gates import ReplaySuite
from evolvable.control.workloads import WorkloadContext

GATE_SEED_OFFSET = 1000
"""Gate tasks come from another seed than report tasks, so a report set never overlaps the gate's."""

RunnerFactory = Callable[[WorkloadContext, dict[str, Any]], Any]
TaskGenerator = Callable[..., Sequence[Any]]


@dataclass(frozen=True)
class TaskSuiteWorkload:
    """A workload plugin: `suite(context)` gives the control plane a `ReplaySuite` and nothing else.

    Options: `gate_tasks` (held-out tasks the replay gate uses), `safety_tasks` (safety probes),
    `seed`, and whatever the runner factory reads."""

    name: str
    runner: RunnerFactory
    generate_tasks: TaskGenerator
    gate_tasks: int
    safety_tasks: int = 8

    def suite(self, context: WorkloadContext) -> ReplaySuite:
        options = dict(context.options)
        seed = int(options.get("seed", 0))
        holdout_n = int(options.get("gate_tasks", self.gate_tasks))
        safety_n = int(options.get("safety_tasks", self.safety_tasks))
        return ReplaySuite(
            self.runner(context, options),
            self.generate_tasks("holdout", holdout_n, seed=seed + GATE_SEED_OFFSET),
            self.generate_tasks("safety", safety_n, seed=seed),
        )
