"""Evolvers turn a decision into a candidate version: memory, skills, prompt, tool descriptions, weights.

Each evolver is `propose(ctx, proposal) -> HarnessCandidate | PolicyCandidate` and raises
`LeverUnavailable` (with a plain reason) when it cannot run here, never a fake candidate.
"""

from __future__ import annotations

from typing import Any

from evolvable.control.evolvers.base import (
    EvolveContext,
    Evolver,
    HarnessCandidate,
    LeverPending,
    LeverUnavailable,
    PolicyCandidate,
)
from evolvable.control.evolvers.memory import MemoryEvolver
from evolvable.control.evolvers.reflective import EvolverModel, PromptEvolver, SkillEvolver
from evolvable.control.evolvers.tools import ToolDescriptionEvolver
from evolvable.control.evolvers.weights import WeightsEvolver
from evolvable.control.models import Lever


def default_evolvers(
    evolver_model: EvolverModel | None = None, trainer: Any = None, policy_servers: tuple[str, ...] = ()
) -> dict[Lever, Evolver]:
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
    "LeverPending",
    "LeverUnavailable",
    "PolicyCandidate",
    "default_evolvers",
]
