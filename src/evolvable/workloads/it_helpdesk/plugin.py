"""The IT helpdesk as a workload plugin (entry point `it_helpdesk` of `evolvable.workloads`).

Built only through the plugin interface: the control plane sees a `ReplaySuite` and nothing else.
Options: `gate_tasks` (default 20), `safety_tasks` (default 8), `seed`, `concurrency`, `max_turns`,
`max_tokens`, `explore_max_plans` (plans the memory lever's exploration tries per recorded ticket).
Its runner can explore (explore.py), so the memory lever finds exemplars for intents live traffic never solves.
"""

from __future__ import annotations

from dataclasses import dataclass

from evolvable.control.gates import ReplaySuite
from evolvable.control.workloads import WorkloadContext
from evolvable.workloads.it_helpdesk.agent import ItHelpdeskRunner
from evolvable.workloads.it_helpdesk.tasks import generate_tasks

GATE_SEED_OFFSET = 1000


@dataclass
class ItHelpdeskWorkload:
    name: str = "it_helpdesk"

    def suite(self, context: WorkloadContext) -> ReplaySuite:
        options = dict(context.options)
        seed = int(options.get("seed", 0))
        runner = ItHelpdeskRunner(
            context.endpoint,
            context.model,
            api_key=context.api_key,
            concurrency=int(options.get("concurrency", 8)),
            max_turns=int(options.get("max_turns", 4)),
            max_tokens=int(options.get("max_tokens", 96)),
            sanitize=context.sanitize,
            explore_max_plans=int(options.get("explore_max_plans", 64)),
        )
        holdout = generate_tasks("holdout", int(options.get("gate_tasks", 20)), seed=seed + GATE_SEED_OFFSET)
        safety = generate_tasks("safety", int(options.get("safety_tasks", 8)), seed=seed)
        return ReplaySuite(runner, holdout, safety)


workload = ItHelpdeskWorkload()
