"""Settings of the models the control plane itself calls, as plain data the composition root fills in.

`EvolverModel` (control/evolvers/reflective.py) writes skill and prompt edits; `JudgeModel` scores runs
against a rubric. The control plane receives them as settings and never reads the configuration itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from evolvable.control.evolvers.reflective import EvolverModel


@dataclass(frozen=True)
class JudgeModel:
    """An OpenAI-compatible model that judges runs of an agent against a rubric."""

    base_url: str
    model: str
    api_key: str = "not-needed"
    rubric: str | None = None
    timeout_s: float = 60.0
    rubrics: dict[str, str] | None = None
    """Per-agent rubrics; an agent not listed is judged by `rubric`."""
    prefill: bool = False
    max_tokens: int | None = None
    """Longest verdict; None: the judge's default."""


__all__ = ["EvolverModel", "JudgeModel"]
