"""Evolvers turn a decision into a candidate version: memory, skills, prompt, tool descriptions, weights.

Each evolver is `propose(ctx, proposal) -> HarnessCandidate | PolicyCandidate` and raises
`LeverUnavailable` (with a plain reason) when it cannot run here, never a fake candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from evolvable.control.decision import Proposal
from evolvable.control.models import Lever, PolicySpec, VersionRecord
from evolvable.control.statistics import AgentStatistics, RunSummary
from evolvable.errors import ControlError
from evolvable.protocol.harness import Harness

if TYPE_CHECKING:
    from evolvable.control.evolvers.reflective import EvolverModel
    from evolvable.control.gates import ReplaySuite


class LeverUnavailable(ControlError):
    """The lever cannot run in this installation; the decision records the reason verbatim."""


@dataclass
class EvolveContext:
    agent: str
    store: Any
    active_harness: Harness
    active_harness_version: str
    runs: list[RunSummary]
    stats: AgentStatistics
    active_policy: VersionRecord | None = None
    suite: ReplaySuite | None = None
    """The agent's ReplaySuite, when one is registered (its runner may explore recorded tasks)."""


@dataclass
class HarnessCandidate:
    harness: Harness
    note: str
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass
class PolicyCandidate:
    spec: PolicySpec
    note: str
    data_snapshot: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


class Evolver(Protocol):
    lever: Lever

    def propose(self, ctx: EvolveContext, proposal: Proposal) -> HarnessCandidate | PolicyCandidate: ...


def default_evolvers(
    evolver_model: EvolverModel | None = None, trainer: Any = None, policy_servers: tuple[str, ...] = ()
) -> dict[Lever, Evolver]:
    from evolvable.control.evolvers.memory import MemoryEvolver
    from evolvable.control.evolvers.reflective import PromptEvolver, SkillEvolver
    from evolvable.control.evolvers.tools import ToolDescriptionEvolver
    from evolvable.control.evolvers.weights import WeightsEvolver

    return {
        Lever.memory: MemoryEvolver(),
        Lever.skill: SkillEvolver(evolver_model),
        Lever.prompt: PromptEvolver(evolver_model),
        Lever.tool: ToolDescriptionEvolver(),
        Lever.weights: WeightsEvolver(trainer, servers=policy_servers),
    }


__all__ = [
    "EvolveContext",
    "Evolver",
    "HarnessCandidate",
    "LeverUnavailable",
    "PolicyCandidate",
    "default_evolvers",
]
