"""What one demo run is asked to do (`DemoConfig`) and what each live round recorded (`RoundRecord`).

Shared by the runner, the configuration builder and the report, so none of them imports another."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evolvable.control.models import Lever


@dataclass
class DemoConfig:
    report_dir: Path
    model: str = "smollm2-135m"
    quick: bool = False
    levers: frozenset[Lever] = frozenset({Lever.memory, Lever.skill, Lever.prompt, Lever.tool, Lever.weights})
    rounds: int = 3
    round_size: int = 16
    report_tasks: int = 24
    gate_tasks: int = 36
    """The replay gate's held-out tickets: a paired test needs a few dozen to see a 10-point gain."""
    safety_tasks: int = 8
    max_tokens: int = 48
    max_turns: int = 3
    concurrency: int = 24
    seed: int = 7
    start: str = "default"
    """Starting harness: `default` (a plain, reasonable agent) or `weak` (prose-only, terse tools)."""
    live_temperature: float = 0.8
    """Live agents sample; the lucky successes are what the memory lever harvests. Measurements are greedy."""
    explore_tasks: int = 3
    """Recorded failed tickets per failing cluster that the memory lever replays in search of a success."""
    explore_max_episodes: int = 12
    """Search budget per ticket (episodes tried before giving up)."""
    lever_comparison: Path | None = Path("benchmarks/results/evolution.json")
    """The evolution benchmark's results, shown in the report when the file exists (a checkout's)."""

    @classmethod
    def build(cls, report_dir: Path, *, quick: bool, levers: frozenset[Lever] | None, model: str) -> DemoConfig:
        cfg = cls(report_dir=report_dir, model=model, quick=quick)
        if quick:
            cfg.rounds, cfg.round_size, cfg.report_tasks, cfg.gate_tasks, cfg.safety_tasks = 2, 10, 12, 24, 4
            cfg.max_tokens, cfg.max_turns = 36, 3
            cfg.explore_tasks, cfg.explore_max_episodes = 1, 12
            cfg.levers = frozenset({Lever.memory, Lever.skill, Lever.prompt, Lever.tool})
        if levers is not None:
            cfg.levers = levers
        return cfg


@dataclass
class RoundRecord:
    round: int
    episodes: int
    success_rate: float
    by_version: dict[str, int]
    actions: list[str] = field(default_factory=list)
    active_harness: str | None = None
    canary_harness: str | None = None
    active_policy: str | None = None
