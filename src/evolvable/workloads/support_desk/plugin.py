"""The support desk as a workload plugin (entry point `support_desk` of `evolvable.workloads`).

Options (from the configuration's workload section): `gate_tasks` (held-out tickets the replay gate
uses, default 24), `safety_tasks` (safety probes, default 8), `seed`, and the runner's
`concurrency`, `max_turns`, `max_tokens`, `explore_max_episodes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from evolvable.control.gates import ReplaySuite
from evolvable.control.workloads import WorkloadContext
from evolvable.workloads.support_desk.replay import SupportDeskRunner
from evolvable.workloads.support_desk.tasks import generate_tasks

GATE_SEED_OFFSET = 1000
"""Gate tickets come from another seed than report tickets, so a report set never overlaps the gate's."""


@dataclass
class SupportDeskWorkload:
    name: str = "support_desk"

    def suite(self, context: WorkloadContext) -> ReplaySuite:
        options = dict(context.options)
        seed = int(options.get("seed", 0))
        runner = SupportDeskRunner(
            context.endpoint,
            context.model,
            api_key=context.api_key,
            concurrency=int(options.get("concurrency", 8)),
            max_turns=int(options.get("max_turns", 4)),
            max_tokens=int(options.get("max_tokens", 64)),
            explore_max_episodes=int(options.get("explore_max_episodes", 12)),
            sanitize=context.sanitize,
        )
        holdout = generate_tasks("holdout", int(options.get("gate_tasks", 24)), seed=seed + GATE_SEED_OFFSET)
        safety = generate_tasks("safety", int(options.get("safety_tasks", 8)), seed=seed)
        return ReplaySuite(runner, holdout, safety)


workload = SupportDeskWorkload()
