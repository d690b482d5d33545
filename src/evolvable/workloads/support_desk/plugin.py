"""The support desk as a workload plugin (entry point `support_desk` of `evolvable.workloads`).

Options (from the configuration's workload section): `gate_tasks` (held-out tickets the replay gate
uses, default 24), `safety_tasks` (safety probes, default 8), `seed`, and the runner's
`concurrency`, `max_turns`, `max_tokens`, `explore_max_episodes`.
"""

from __future__ import annotations

from typing import Any

from evolvable.control.workloads import WorkloadContext
from evolvable.workloads.suite import TaskSuiteWorkload
from evolvable.workloads.support_desk.replay import SupportDeskRunner
from evolvable.workloads.support_desk.tasks import generate_tasks


def _runner(context: WorkloadContext, options: dict[str, Any]) -> SupportDeskRunner:
    return SupportDeskRunner(
        context.endpoint,
        context.model,
        api_key=context.api_key,
        concurrency=int(options.get("concurrency", 8)),
        max_turns=int(options.get("max_turns", 4)),
        max_tokens=int(options.get("max_tokens", 64)),
        explore_max_episodes=int(options.get("explore_max_episodes", 12)),
        sanitize=context.sanitize,
    )


workload = TaskSuiteWorkload("support_desk", _runner, generate_tasks, gate_tasks=24)
