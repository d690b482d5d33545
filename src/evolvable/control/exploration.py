"""Exploration by replay: the memory lever's way to find successes that live traffic does not contain.

Memory needs successful runs of a failing cluster. When the live window has none (a small model that
fails a cluster every time), a runner that can replay recorded tasks may *explore* them: re-run them
under whatever search its environment allows, keep only the runs its verifier passes, and hand them
back as exemplars. The gates then measure, on held-out tasks the explorer never saw, whether the
exemplars teach the unconstrained agent anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from evolvable.control.models import PolicySpec
from evolvable.protocol.harness import Harness, MemoryExemplar


@dataclass
class ExplorationReport:
    exemplars: list[MemoryExemplar]
    """Verified, safe successes, each with its cluster; best first within a cluster."""
    tasks: int = 0
    episodes: int = 0
    per_cluster: dict[str, dict[str, int]] = field(default_factory=dict)
    """cluster -> {"tasks": n, "solved": m, "episodes": k}."""
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "episodes": self.episodes,
            "per_cluster": self.per_cluster,
            "wall_s": round(self.wall_s, 1),
        }


@runtime_checkable
class Explorer(Protocol):
    """A replay runner that can rebuild recorded tasks and search them for verified successes."""

    def recorded_task(self, task_id: str, cluster: str) -> Any | None:
        """The task behind a recorded run, or None when it cannot be rebuilt or must not be explored
        (held-out and safety tasks never are: that would leak the gates' tasks into the harness)."""
        ...

    def explore(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Any]) -> ExplorationReport: ...


def explorer_of(suite: Any) -> Explorer | None:
    runner = getattr(suite, "runner", None)
    return runner if isinstance(runner, Explorer) else None
