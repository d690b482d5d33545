"""What the built-in workloads' replay runners share, so each runner only says how to run its own episodes.

Episodes are memoised per (harness, served model, task): with greedy decoding the same inputs give the same
episode, so the active version runs once per task however many candidates are compared with it. An
exploration's searches are tallied per cluster the same way for every workload.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from evolvable.control.exploration import ExplorationReport
from evolvable.protocol.harness import Harness, MemoryExemplar

EpisodeT = TypeVar("EpisodeT")


class EpisodeMemo(Generic[EpisodeT]):
    """Episodes by (harness hash, served model, task id); only the missing ones are run."""

    def __init__(self) -> None:
        self._episodes: dict[tuple[str, str, str], EpisodeT] = {}
        self._lock = threading.Lock()
        self.episodes_run = 0

    def episodes(
        self,
        harness: Harness,
        model: str,
        tasks: Sequence[Any],
        run_missing: Callable[[list[Any]], Iterable[tuple[str, EpisodeT]]],
    ) -> list[EpisodeT]:
        """The tasks' episodes in task order; `run_missing` gets the tasks not seen yet, gives (task id, episode)."""
        key = harness.content_hash()
        missing = [t for t in tasks if (key, model, t.id) not in self._episodes]
        if missing:
            ran = list(run_missing(missing))
            with self._lock:
                for task_id, episode in ran:
                    self._episodes[(key, model, task_id)] = episode
                self.episodes_run += len(ran)
        return [self._episodes[(key, model, t.id)] for t in tasks]


def tally_exploration(
    searched: Sequence[tuple[str, int, MemoryExemplar | None]],
    started: float,
    sanitize: Callable[[MemoryExemplar], MemoryExemplar] | None,
) -> ExplorationReport:
    """The report of searches given as (cluster, episodes tried, exemplar when solved), begun at `started`
    (perf_counter); `sanitize` (the redactor) runs over every exemplar before it leaves the runner."""
    report = ExplorationReport(exemplars=[], tasks=len(searched), wall_s=time.perf_counter() - started)
    for cluster, tried, exemplar in searched:
        row = report.per_cluster.setdefault(cluster, {"tasks": 0, "solved": 0, "episodes": 0})
        row["tasks"] += 1
        row["episodes"] += tried
        report.episodes += tried
        if exemplar is not None:
            row["solved"] += 1
            report.exemplars.append(sanitize(exemplar) if sanitize else exemplar)
    return report
