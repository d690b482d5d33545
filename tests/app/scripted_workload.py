"""A scripted replay workload for process-level tests (`object: tests.app.scripted_workload:workload`).

Outcomes follow the control tests' scripted policy (a harness that carries help for a task's cluster
solves it). `gate_delay_s` in the workload options, or EVOLVABLE_TEST_GATE_DELAY_S in a replica's
environment, makes every replay that slow: a leader can then be killed in the middle of its gates.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from tests.control.conftest import ScriptedRunner, ScriptedTask, tasks

from evolvable.control.gates import ReplaySuite, TaskOutcome
from evolvable.control.models import PolicySpec
from evolvable.control.workloads import WorkloadContext
from evolvable.protocol.harness import Harness


class DelayedRunner(ScriptedRunner):
    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[ScriptedTask]) -> list[TaskOutcome]:
        time.sleep(self.delay_s)
        return super().run(harness, policy, tasks)


class ScriptedWorkload:
    name = "scripted"

    def suite(self, context: WorkloadContext) -> ReplaySuite:
        delay = float(os.environ.get("EVOLVABLE_TEST_GATE_DELAY_S", context.options.get("gate_delay_s", 0)))
        return ReplaySuite(DelayedRunner(delay), tasks(12, "hold"), tasks(3, "probe", probe=True))


workload = ScriptedWorkload()
