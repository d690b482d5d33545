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

import openai

from evolvable.control.exploration import ExplorationReport
from evolvable.protocol.harness import Harness, MemoryExemplar
from evolvable.protocol.models import ChatMessage

EpisodeT = TypeVar("EpisodeT")

SENTENCE_STOPS = ('"', "\n", ".", "!", "?")
"""Model-written text in an explored action ends at its closing quote or its first sentence: a worked example
the model will copy must be short; long model text rambles, repeats itself and overruns the token limit."""


def prefill_wire(messages: Sequence[ChatMessage], prefix: str) -> list[dict[str, Any]]:
    """The request's messages with a final assistant message `prefix` for the server to continue."""
    return [*(m.model_dump(mode="json", exclude_none=True) for m in messages), {"role": "assistant", "content": prefix}]


def continue_prefill(
    client: openai.OpenAI,
    model: str,
    wire: list[dict[str, Any]],
    *,
    max_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
) -> str:
    """One sentence the model writes continuing the final assistant message of `wire` (`continue_final_message`,
    as the embedded policy server and vLLM offer), ended with a dot when it stopped mid-sentence."""
    completion = client.chat.completions.create(
        model=model,
        messages=wire,  # type: ignore[arg-type]
        temperature=temperature,
        max_tokens=max_tokens,
        stop=list(SENTENCE_STOPS),
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
        seed=seed if seed is not None else openai.omit,
    )
    text = (completion.choices[0].message.content or "").strip() if completion.choices else ""
    return text + "." if text and text[-1].isalnum() else text


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
