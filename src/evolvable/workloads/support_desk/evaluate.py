"""Evaluate a harness on a task set: success with Wilson intervals, per intent, safety, reward.

Episodes run on threads because the policy server batches concurrent requests: eight
episodes in flight cost little more wall time than one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Literal

import openai
from pydantic import Field

from evolvable.protocol.harness import Harness
from evolvable.protocol.models import StrictModel
from evolvable.workloads.support_desk.agent import EpisodeResult, run_episode
from evolvable.workloads.support_desk.tasks import Task


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (sane at 0, 1 and small n)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


class RateStats(StrictModel):
    n: int
    successes: int
    rate: float
    ci_low: float
    ci_high: float
    mean_reward: float

    @classmethod
    def of(cls, episodes: Sequence[EpisodeResult]) -> RateStats:
        n = len(episodes)
        wins = sum(1 for e in episodes if e.success)
        low, high = wilson_interval(wins, n)
        mean = sum(e.reward for e in episodes) / n if n else 0.0
        return cls(n=n, successes=wins, rate=wins / n if n else 0.0, ci_low=low, ci_high=high, mean_reward=mean)


class EvalReport(StrictModel):
    model: str
    endpoint: str
    harness_version: str | None
    overall: RateStats
    per_intent: dict[str, RateStats]
    safety_pass_rate: float
    safety_ci: tuple[float, float]
    safety_violations: dict[str, int] = Field(default_factory=dict)
    process_labels: dict[str, int] = Field(default_factory=dict, description="Counts of process-signal labels.")
    errors: int = Field(0, description="Episodes stopped by an upstream error.")
    wall_s: float = 0.0
    episodes: list[EpisodeResult] = Field(default_factory=list, exclude=True)

    @property
    def success_rate(self) -> float:
        return self.overall.rate

    @property
    def mean_reward(self) -> float:
        return self.overall.mean_reward

    @classmethod
    def from_episodes(
        cls, episodes: Sequence[EpisodeResult], *, model: str, endpoint: str, harness_version: str | None, wall_s: float
    ) -> EvalReport:
        intents = sorted({e.intent for e in episodes})
        safe = sum(1 for e in episodes if e.verdict.safety.passed)
        violations: dict[str, int] = {}
        labels: dict[str, int] = {}
        for e in episodes:
            for v in e.verdict.safety.violations:
                violations[v] = violations.get(v, 0) + 1
            for s in e.verdict.steps:
                labels[s.label] = labels.get(s.label, 0) + 1
        return cls(
            model=model,
            endpoint=endpoint,
            harness_version=harness_version,
            overall=RateStats.of(episodes),
            per_intent={i: RateStats.of([e for e in episodes if e.intent == i]) for i in intents},
            safety_pass_rate=safe / len(episodes) if episodes else 1.0,
            safety_ci=wilson_interval(safe, len(episodes)),
            safety_violations=violations,
            process_labels=dict(sorted(labels.items())),
            errors=sum(1 for e in episodes if e.error),
            wall_s=wall_s,
            episodes=list(episodes),
        )


def evaluate(
    tasks: Sequence[Task],
    endpoint: str,
    model: str,
    harness: Harness | None,
    *,
    concurrency: int = 8,
    api_key: str | None = None,
    record: bool | None = False,
    max_turns: int = 4,
    max_tokens: int = 64,
    temperature: float = 0.0,
    apply_harness: Literal["client", "proxy"] = "client",
    timeout_s: float = 300.0,
    seed: int | None = None,
    on_episode: Callable[[EpisodeResult], Any] | None = None,
) -> EvalReport:
    """Run every task once and summarise.

    `endpoint` is an OpenAI-compatible base URL (with /v1). `record`: True opens a proxy
    session per episode (the endpoint must be an Evolvable proxy), False never does (an
    evaluation should not become training data by accident), None detects it.
    `seed`: episode i samples with seed + i (reproducible sampling at temperature > 0).
    `on_episode` is called after each episode (progress bars).
    """
    import time

    client = openai.OpenAI(base_url=endpoint, api_key=api_key or "evolvable", timeout=timeout_s, max_retries=1)
    started = time.perf_counter()
    episodes: list[EpisodeResult] = []

    def one(index: int, task: Task) -> EpisodeResult:
        return run_episode(
            client,
            model,
            task,
            harness,
            max_turns=max_turns,
            temperature=temperature,
            seed=None if seed is None else seed + index,
            proxy_session=record,
            apply_harness=apply_harness,
            max_tokens=max_tokens,
        )

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = [pool.submit(one, i, t) for i, t in enumerate(tasks)]
        for future in as_completed(futures):
            episode = future.result()
            episodes.append(episode)
            if on_episode is not None:
                on_episode(episode)
    order = {t.id: i for i, t in enumerate(tasks)}
    episodes.sort(key=lambda e: order.get(e.task_id, 0))
    client.close()
    return EvalReport.from_episodes(
        episodes,
        model=model,
        endpoint=endpoint,
        harness_version=harness.content_hash() if harness is not None else None,
        wall_s=time.perf_counter() - started,
    )
