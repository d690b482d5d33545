"""Replay from recorded traffic, for agents with no workload plugin and no webhook.

A recorded run is a task: its last `turns_per_task` llm_call steps are re-asked under the harness
being gated (the recorded conversation up to each call, tool results included, stays fixed; only
the harness around it changes), and the judge scores each new reply against the recorded reply and
how the recorded run ended. A task succeeds when every re-asked turn scores >= 0.5. The gates then
compare candidate and active version on the same tasks with their paired test.

Recorded runs are split per cluster into a gate set and a report set (by a hash of the run id, so
the split is stable as the window moves): the gates only ever see the gate set, so the report set
measures what the gates selected for without being selected on. A run's cluster is the one it reports,
else the agent's fitted task clusterer's (the clusters statistics and decisions use), else `all`.

What this can establish: whether the candidate's *next reply* in a recorded situation is judged
better — a single-turn counterfactual. What it cannot: what the tools would have returned for a
different call, or how a whole new episode unfolds; the canary measures that on live traffic.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from evolvable.control.gates import ReplayFailed, ReplaySuite, TaskOutcome
from evolvable.control.judge import Judge, JudgeUnusable, assistant_turns
from evolvable.control.models import REPLAY_METADATA_KEY, PolicySpec
from evolvable.control.statistics import Clusterer, summarize, task_text_of
from evolvable.control.workloads import WorkloadContext
from evolvable.protocol.harness import Harness, render_messages
from evolvable.protocol.models import ChatMessage, Trajectory, TrajectoryStatus
from evolvable.store import Store

ENDED = [TrajectoryStatus.completed.value, TrajectoryStatus.failed.value, TrajectoryStatus.abandoned.value]


@dataclass(frozen=True)
class RecordedTurn:
    conversation: tuple[ChatMessage, ...]
    """What the agent had seen at this call, without the harness that wrapped it (no system prompt or exemplars)."""
    reply: str
    """What the agent answered then."""


@dataclass(frozen=True)
class RecordedTask:
    id: str
    """The recorded run's trajectory id."""
    cluster: str
    task_text: str
    turns: tuple[RecordedTurn, ...]
    reference_ok: bool | None
    """How the recorded run ended (posted outcome, else the judge, else its status); None: unknown."""


def split_of(trajectory_id: str, gate_share: float) -> str:
    """'gate' or 'report', stable per run id."""
    point = int.from_bytes(hashlib.sha256(trajectory_id.encode()).digest()[:8], "big") / 2**64
    return "gate" if point < gate_share else "report"


def conversation_of(messages: Sequence[ChatMessage], task_text: str) -> list[ChatMessage]:
    """The conversation from the task's own user turn on, without system messages and retrieved exemplars."""
    turns = [m for m in messages if m.role not in ("system", "developer")]
    start = 0
    needle = task_text.strip()
    for i, m in enumerate(turns):
        if m.role == "user" and needle and (m.text().strip() == needle or needle[:80] in m.text()):
            start = i
    return turns[start:]


def recorded_task(
    t: Trajectory, turns_per_task: int, success_threshold: float = 0.5, clusterer: Clusterer | None = None
) -> RecordedTask | None:
    """The run as a replay task, or None when it has no llm_call with a reply to re-ask."""
    summary = summarize(t, clusterer=clusterer, success_threshold=success_threshold)
    text = task_text_of(t)
    turns = []
    for step, reply in assistant_turns(t)[-turns_per_task:]:
        conversation = conversation_of(step.request_messages, text)
        if conversation and reply:
            turns.append(RecordedTurn(tuple(conversation), reply))
    if not turns:
        return None
    return RecordedTask(t.id, summary.cluster, text, tuple(turns), summary.success)


def _context_text(conversation: Sequence[ChatMessage]) -> str:
    return "\n".join(f"{m.role}: {m.text()[:400]}" for m in conversation[-6:])


class RecordedReplayRunner:
    """Re-asks recorded turns under a harness through an OpenAI-compatible endpoint; the judge scores them."""

    def __init__(
        self,
        agent: str,
        judge: Judge,
        endpoint: str,
        model: str,
        *,
        api_key: str | None = None,
        max_tokens: int = 128,
        concurrency: int = 4,
        timeout_s: float = 120.0,
    ) -> None:
        self.agent = agent
        self.judge = judge
        self.endpoint = endpoint
        self.model = model
        self.api_key = api_key or "not-needed"
        self.max_tokens = max_tokens
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self._memo: dict[tuple[str, str, str], TaskOutcome] = {}
        self._lock = threading.Lock()

    def _ask(self, harness: Harness, model: str, task: RecordedTask, turn: RecordedTurn) -> str:
        from openai import OpenAI

        messages = render_messages(harness, list(turn.conversation), task_text=task.task_text, cluster=task.cluster)
        client = OpenAI(base_url=self.endpoint, api_key=self.api_key, timeout=self.timeout_s, max_retries=1)
        reply = client.chat.completions.create(
            model=model,
            messages=cast(Any, [m.model_dump(mode="json", exclude_none=True) for m in messages]),
            temperature=0.0,
            max_tokens=self.max_tokens,
        )
        return reply.choices[0].message.content or ""

    def _outcome(self, harness: Harness, model: str, task: RecordedTask) -> TaskOutcome:
        scores, reasons = [], []
        for turn in task.turns:
            answer = self._ask(harness, model, task, turn)
            try:
                score = self.judge.compare(
                    self.agent, _context_text(turn.conversation), turn.reply, task.reference_ok, answer
                )
            except JudgeUnusable as err:
                return TaskOutcome(task.id, task.cluster, success=False, detail=f"judge unusable: {err}")
            scores.append(score.score)
            reasons.append(score.reason)
        return TaskOutcome(
            task.id,
            task.cluster,
            success=all(s >= 0.5 for s in scores),
            reward=sum(scores) / len(scores),
            detail="; ".join(r for r in reasons if r)[:500],
        )

    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Any]) -> list[TaskOutcome]:
        model = policy.served_model if policy else self.model
        key = harness.content_hash()
        missing = [t for t in tasks if (key, model, t.id) not in self._memo]
        with ThreadPoolExecutor(max(1, min(self.concurrency, len(missing) or 1))) as pool:
            outcomes = pool.map(lambda t: self._outcome(harness, model, t), missing)
            for task, outcome in zip(missing, outcomes, strict=True):
                with self._lock:
                    self._memo[(key, model, task.id)] = outcome
        out = [self._memo[(key, model, t.id)] for t in tasks]
        unusable = sum(1 for o in out if o.detail.startswith("judge unusable"))
        if out and unusable * 2 > len(out):
            raise ReplayFailed(f"the judge could not score {unusable} of {len(out)} recorded replays")
        return out


class RecordedSuite(ReplaySuite):
    """The gate set as `holdout` and the report set the gates never see, re-read from the store at most
    every `refresh_s` seconds (traffic keeps arriving; an agent has none when `serve` starts)."""

    def __init__(self, runner: RecordedReplayRunner, workload: RecordedTrafficWorkload, refresh_s: float) -> None:
        self.runner = runner
        self.workload = workload
        self.refresh_s = refresh_s
        self._split: tuple[list[RecordedTask], list[RecordedTask]] = ([], [])
        self._read_at = float("-inf")

    def _current(self) -> tuple[list[RecordedTask], list[RecordedTask]]:
        if time.monotonic() - self._read_at >= self.refresh_s:
            self._split = self.workload.split()
            self._read_at = time.monotonic()
        return self._split

    @property
    def holdout(self) -> list[RecordedTask]:  # type: ignore[override]
        return self._current()[0]

    @property
    def safety(self) -> list[RecordedTask]:  # type: ignore[override]
        return []

    @property
    def report(self) -> list[RecordedTask]:
        return self._current()[1]


class RecordedTrafficWorkload:
    """Gate tasks from an agent's own recorded runs (see the module docstring for what this establishes).

    `gate_share` of each cluster's runs (by a stable hash) form the gate set, at most
    `per_cluster` of them; the rest is the report set. The context's endpoint should be the
    policy server or upstream itself, not the proxy, so replays never become live traffic.
    """

    def __init__(
        self,
        store: Store,
        tenant: str | None,
        agent: str,
        *,
        judge: Judge,
        gate_share: float = 0.5,
        per_cluster: int = 12,
        turns_per_task: int = 1,
        window: int = 300,
        max_tokens: int = 128,
        clusterer: Callable[[], Clusterer | None] | None = None,
    ) -> None:
        self.store = store
        self.tenant = tenant
        self.agent = agent
        self.name = f"recorded:{agent}"
        self.judge = judge
        self.gate_share = gate_share
        self.per_cluster = per_cluster
        self.turns_per_task = turns_per_task
        self.window = window
        self.max_tokens = max_tokens
        self.clusterer = clusterer
        """The agent's current fitted clusterer (it is refitted on drift), for runs that report no cluster."""

    def recorded_tasks(self) -> dict[str, list[RecordedTask]]:
        """Per cluster, the newest ended live runs as tasks (replays of candidates excluded)."""
        from evolvable.store import TrajectoryFilter

        headers, _ = self.store.list_trajectories(
            TrajectoryFilter(agent=self.agent, tenant_id=self.tenant, status=ENDED), limit=self.window
        )
        clusterer = self.clusterer() if self.clusterer is not None else None
        out: dict[str, list[RecordedTask]] = {}
        for header in headers:
            if REPLAY_METADATA_KEY in header.metadata:
                continue
            trajectory = self.store.get_trajectory(header.id, self.tenant)
            task = recorded_task(trajectory, self.turns_per_task, clusterer=clusterer)
            if task is not None:
                out.setdefault(task.cluster, []).append(task)
        return out

    def split(self) -> tuple[list[RecordedTask], list[RecordedTask]]:
        gate: list[RecordedTask] = []
        report: list[RecordedTask] = []
        for cluster in sorted(tasks := self.recorded_tasks()):
            ordered = sorted(tasks[cluster], key=lambda t: t.id)
            gate += [t for t in ordered if split_of(t.id, self.gate_share) == "gate"][: self.per_cluster]
            report += [t for t in ordered if split_of(t.id, self.gate_share) == "report"][: self.per_cluster]
        return gate, report

    def suite(self, context: WorkloadContext) -> RecordedSuite:
        runner = RecordedReplayRunner(
            self.agent,
            self.judge,
            context.endpoint,
            context.model,
            api_key=context.api_key,
            max_tokens=int(context.options.get("max_tokens", self.max_tokens)),
        )
        return RecordedSuite(runner, self, float(context.options.get("refresh_s", 60.0)))
