"""Replay runners: how the gates run a candidate on held-out tasks with their verifiers.

`SupportDeskRunner` runs the built-in workload through any OpenAI-compatible endpoint (the policy
server directly, so replays never become training data). Episodes are memoised by (harness,
served model, task): with greedy decoding the same inputs give the same episode, so the active
version runs once per task however many candidates are compared with it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from evolvable.control.gates import TaskOutcome
from evolvable.control.models import PolicySpec
from evolvable.protocol.harness import Harness


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
    ) -> None:
        self.endpoint = endpoint
        self.model = model
        self.concurrency = concurrency
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._memo: dict[tuple[str, str, str], Any] = {}
        self._lock = threading.Lock()
        self.episodes_run = 0

    def episodes(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Any]) -> list[Any]:
        """EpisodeResults for the tasks (memoised), in task order."""
        from evolvable.workloads.support_desk.evaluate import evaluate

        model = policy.served_model if policy else self.model
        key = harness.content_hash()
        missing = [t for t in tasks if (key, model, t.id) not in self._memo]
        if missing:
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
            with self._lock:
                for episode in report.episodes:
                    self._memo[(key, model, episode.task_id)] = episode
                self.episodes_run += len(report.episodes)
        return [self._memo[(key, model, t.id)] for t in tasks]

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
