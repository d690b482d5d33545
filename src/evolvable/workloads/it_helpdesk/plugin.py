"""The IT helpdesk as a workload plugin (entry point `it_helpdesk` of `evolvable.workloads`).

Built only through the plugin interface: the control plane sees a `ReplaySuite` and nothing else.
Options: `gate_tasks` (default 20), `safety_tasks` (default 8), `seed`, `concurrency`, `max_turns`,
`max_tokens`, `explore_max_plans` (plans the memory lever's exploration tries per recorded ticket).
Its runner can explore (explore.py), so the memory lever finds exemplars for intents live traffic never solves.
"""

from __future__ import annotations

from typing import Any

from evolvable.control.workloads import WorkloadContext
from evolvable.workloads.it_helpdesk.agent import ItHelpdeskRunner
from evolvable.workloads.it_helpdesk.tasks import generate_tasks
from evolvable.workloads.suite import TaskSuiteWorkload


def _runner(context: WorkloadContext, options: dict[str, Any]) -> ItHelpdeskRunner:
    return ItHelpdeskRunner(
        context.endpoint,
        context.model,
        api_key=context.api_key,
        concurrency=int(options.get("concurrency", 8)),
        max_turns=int(options.get("max_turns", 4)),
        max_tokens=int(options.get("max_tokens", 96)),
        sanitize=context.sanitize,
        explore_max_plans=int(options.get("explore_max_plans", 64)),
    )


workload = TaskSuiteWorkload("it_helpdesk", _runner, generate_tasks, gate_tasks=20)
