"""Replay runners: how the gates run a candidate on held-out tasks with their verifiers.

`SupportDeskRunner` runs the built-in workload through any OpenAI-compatible endpoint (the policy
server directly, so replays never become training data). Episodes are memoised by (harness,
served model, task): with greedy decoding the same inputs give the same episode, so the active
version runs once per task however many candidates are compared with it.

It is also an `Explorer`: recorded train-split tickets are rebuilt from their ids and searched in
the replayable back office (`workloads.support_desk.explore`); `sanitize` (e.g. the governance
redactor) runs over every exemplar before it can reach the registry.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evolvable.control.exploration import ExplorationReport
from evolvable.control.gates import TaskOutcome
from evolvable.control.models import PolicySpec
from evolvable.protocol.harness import Harness, MemoryExemplar
from evolvable.workloads.runner import EpisodeMemo, tally_exploration

_TASK_ID = re.compile(r"^sd-(train)-(\d+)-(\d+)$")


class SupportDeskRunner:
    def __init__(
        self,
        endpoint: str,
        model: str,
        *,
        concurrency: int = 8,
        max_turns: int = 4,
        max_tokens: int = 64,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        explore_max_episodes: int = 12,
        explore_writer: tuple[str, str] | None = None,
        sanitize: Callable[[MemoryExemplar], MemoryExemplar] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.model = model
        self.concurrency = concurrency
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.explore_max_episodes = explore_max_episodes
        self.explore_writer = explore_writer
        """(endpoint, model) that writes the explorer's free text; None: the agent's own policy. In
        production a stronger model writes better worked examples than a small agent can."""
        self.sanitize = sanitize
        self._memo: EpisodeMemo[Any] = EpisodeMemo()

    def episodes(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Any]) -> list[Any]:
        """EpisodeResults for the tasks (memoised), in task order."""
        from evolvable.workloads.support_desk.evaluate import evaluate

        model = policy.served_model if policy else self.model

        def run_missing(missing: list[Any]) -> list[tuple[str, Any]]:
            report = evaluate(
                missing,
                self.endpoint,
                model,
                harness,
                concurrency=self.concurrency,
                api_key=self.api_key,
                record=False,
                max_turns=self.max_turns,
                max_tokens=self.max_tokens,
                timeout_s=self.timeout_s,
            )
            return [(episode.task_id, episode) for episode in report.episodes]

        return self._memo.episodes(harness, model, tasks, run_missing)

    @property
    def episodes_run(self) -> int:
        return self._memo.episodes_run

    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Any]) -> list[TaskOutcome]:
        return [
            TaskOutcome(
                task_id=e.task_id,
                cluster=e.intent,
                success=e.success,
                reward=e.reward,
                violation=not e.verdict.safety.passed,
                detail=e.error or "",
            )
            for e in self.episodes(harness, policy, tasks)
        ]

    # ------------------------------------------------------------------ exploration

    def recorded_task(self, task_id: str, cluster: str) -> Any | None:
        """Train-split tickets only (`sd-train-{seed}-{index}`); held-out and safety ids are refused."""
        from evolvable.workloads.support_desk.tasks import ALL_INTENTS, make_task

        match = _TASK_ID.match(task_id or "")
        if match is None or cluster not in ALL_INTENTS:
            return None
        return make_task("train", int(match.group(2)), int(match.group(3)), cluster)

    def explore(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Any]) -> ExplorationReport:
        """Search each task (concurrently; the policy server batches) and keep the verified, safe successes."""
        import openai

        from evolvable.workloads.support_desk.explore import SearchExplorer

        endpoint, model = self.explore_writer or (self.endpoint, policy.served_model if policy else self.model)
        client = openai.OpenAI(
            base_url=endpoint, api_key=self.api_key or "evolvable", timeout=self.timeout_s, max_retries=1
        )

        def search(task: Any) -> tuple[Any, list[Any]]:
            explorer = SearchExplorer(
                client, model, harness, max_turns=self.max_turns, max_episodes=self.explore_max_episodes
            )
            return task, explorer.search(task)

        started = time.perf_counter()
        try:
            with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
                results = list(pool.map(search, tasks))
        finally:
            client.close()
        searched = [
            (task.cluster, len(tried), tried[-1].exemplar(task) if tried and tried[-1].success else None)
            for task, tried in results
        ]
        report = tally_exploration(searched, started, self.sanitize)
        # Complete processes first (full reward), then fewest turns: the clearest worked example.
        report.exemplars.sort(key=lambda ex: (ex.cluster or "", -(ex.reward or 0.0), len(ex.messages)))
        return report
