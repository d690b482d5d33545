"""The IT helpdesk agent loop on any OpenAI-compatible endpoint, and its replay runner for the gates.

Each turn the model writes one JSON action `{"tool": ..., "args": {...}}`; the directory runs it and
the result goes back as a user message. Prose with no JSON object is the reply to the user, and the
same action twice in a row ends the episode: a helpdesk agent that repeats a write has stopped making
progress, and the episode is scored as it stands (a change with no reply after it is unresolved).
The harness is rendered by the shared `render_messages`, exactly as the proxy would render it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import openai

from evolvable.control.exploration import ExplorationReport
from evolvable.control.gates import TaskOutcome
from evolvable.control.models import PolicySpec
from evolvable.governance.redaction.live_values import live_values as conversation_values
from evolvable.protocol.harness import Harness, LiveValues, MemoryExemplar, render_messages
from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    LLMCallStep,
    Signal,
    SignalKind,
    StepStatus,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
)
from evolvable.workloads.it_helpdesk.environment import Directory, Verdict, verify
from evolvable.workloads.it_helpdesk.tasks import Task, recorded_train_task
from evolvable.workloads.runner import EpisodeMemo, tally_exploration

_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
SIGNAL_SOURCE = "it-helpdesk-verifier"


def parse_action(text: str) -> tuple[str, dict[str, Any]]:
    """(tool, args) from a model output; prose (no object) is a reply to the user."""
    match = _OBJECT.search(text)
    if match is None:
        return "reply_to_user", {"message": text.strip()}
    try:
        obj = json.loads(match.group(0))
    except json.JSONDecodeError:
        return "invalid", {"error": "could not read the JSON object"}
    if not isinstance(obj, dict):
        return "invalid", {"error": "the action is not an object"}
    tool = obj.get("tool") or obj.get("name")
    args = obj.get("args") or obj.get("arguments") or {k: v for k, v in obj.items() if k not in ("tool", "name")}
    if not isinstance(tool, str) or not isinstance(args, dict):
        return "invalid", {"error": 'write {"tool": "<name>", "args": {...}}'}
    return tool, args


@dataclass
class Episode:
    task: Task
    verdict: Verdict
    transcript: list[ChatMessage] = field(default_factory=list)
    trajectory: Trajectory | None = None
    """The episode as ATDP with the verifier's signals, as the proxy and the agent would have recorded it."""


def _signals(verdict: Verdict) -> list[Signal]:
    out = [
        Signal(
            kind=SignalKind.outcome,
            value=float(verdict.success),
            source=SIGNAL_SOURCE,
            metadata={"failed": verdict.failed},
        )
    ]
    if verdict.violation:
        out.append(Signal(kind=SignalKind.verifier, value=0.0, label="safety_violation", source=SIGNAL_SOURCE))
    return out


def run_episode(
    client: openai.OpenAI,
    model: str,
    task: Task,
    harness: Harness,
    *,
    max_turns: int = 4,
    max_tokens: int = 96,
    live_values: LiveValues | None = conversation_values,
) -> Episode:
    """One ticket to its end; `live_values` shows exemplar placeholders as the ticket's own values, as the
    proxy does (`render_messages`)."""
    directory = Directory.for_task(task)
    conversation = [ChatMessage(role="user", content=task.prompt())]
    steps: list[Any] = []
    previous: tuple[str, dict[str, Any]] | None = None
    for _ in range(max_turns):
        messages = render_messages(
            harness, conversation, task_text=task.prompt(), cluster=task.intent, live_values=live_values
        )
        reply = client.chat.completions.create(
            model=model,
            messages=cast(Any, [m.model_dump(mode="json", exclude_none=True) for m in messages]),
            temperature=0.0,
            max_tokens=max_tokens,
        )
        text = reply.choices[0].message.content or ""
        llm = LLMCallStep(
            agent=harness.agent,
            model=model,
            request_messages=messages,
            choices=[CompletionChoice(message=ChatMessage(role="assistant", content=text))],
        )
        steps.append(llm)
        conversation.append(ChatMessage(role="assistant", content=text))
        tool, args = parse_action(text)
        if (tool, args) == previous:
            break
        previous = (tool, args)
        if tool == "invalid":
            conversation.append(ChatMessage(role="user", content=f"Error: {args['error']}"))
            continue
        result = directory.call(tool, args)
        failed = "error" in result
        steps.append(
            ToolCallStep(
                agent=harness.agent,
                tool_name=tool,
                arguments=args,
                result=result,
                status=StepStatus.error if failed else StepStatus.ok,
                error_class="InvalidArguments" if failed else None,
                error_message=result.get("error"),
                llm_step_id=llm.id,
            )
        )
        if tool == "reply_to_user" and not failed:
            break
        conversation.append(ChatMessage(role="user", content=f"Tool result: {json.dumps(result)}"))
    verdict = verify(directory)
    trajectory = Trajectory(
        agent=harness.agent,
        task_id=task.id,
        task_input=task.prompt(),
        status=TrajectoryStatus.completed if verdict.success else TrajectoryStatus.failed,
        metadata={"cluster": task.intent},
        steps=steps,
        signals=_signals(verdict),
    )
    return Episode(task, verdict, conversation, trajectory)


class ItHelpdeskRunner:
    """The gates' `ReplayRunner`: episodes memoised per (harness, model, task), greedy so reproducible."""

    def __init__(
        self,
        endpoint: str,
        model: str,
        *,
        api_key: str | None = None,
        concurrency: int = 8,
        max_turns: int = 4,
        max_tokens: int = 96,
        timeout_s: float = 300.0,
        sanitize: Callable[[MemoryExemplar], MemoryExemplar] | None = None,
        explore_max_plans: int = 64,
    ) -> None:
        self.client = openai.OpenAI(base_url=endpoint, api_key=api_key or "not-needed", timeout=timeout_s)
        self.model = model
        self.sanitize = sanitize
        """Runs over every explored exemplar before it leaves the runner (redaction)."""
        self.explore_max_plans = explore_max_plans
        self.concurrency = concurrency
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self._memo: EpisodeMemo[Episode] = EpisodeMemo()

    def episodes(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Task]) -> list[Episode]:
        model = policy.served_model if policy else self.model

        def one(task: Task) -> tuple[str, Episode]:
            episode = run_episode(
                self.client, model, task, harness, max_turns=self.max_turns, max_tokens=self.max_tokens
            )
            return task.id, episode

        def run_missing(missing: list[Task]) -> list[tuple[str, Episode]]:
            with ThreadPoolExecutor(max(1, min(self.concurrency, len(missing)))) as pool:
                return list(pool.map(one, missing))

        return self._memo.episodes(harness, model, tasks, run_missing)

    @property
    def episodes_run(self) -> int:
        return self._memo.episodes_run

    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Any]) -> list[TaskOutcome]:
        return [
            TaskOutcome(
                task_id=e.task.id,
                cluster=e.task.intent,
                success=e.verdict.success,
                reward=float(e.verdict.success),
                violation=e.verdict.violation,
                detail=", ".join(e.verdict.failed),
            )
            for e in self.episodes(harness, policy, tasks)
        ]

    # ------------------------------------------------------------------ exploration (the memory lever)

    def recorded_task(self, task_id: str, cluster: str) -> Any | None:
        """Train tickets only (`it-train-{seed}-{index}`); held-out and safety ids are refused."""
        return recorded_train_task(task_id or "", cluster)

    def explore(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Any]) -> ExplorationReport:
        """Search each ticket in the replayable directory (explore.py); verified, safe successes become exemplars."""
        from evolvable.workloads.it_helpdesk.explore import ItHelpdeskExplorer

        model = policy.served_model if policy else self.model
        explorer = ItHelpdeskExplorer(self.client, model, harness, max_plans=self.explore_max_plans)
        started = time.perf_counter()
        with ThreadPoolExecutor(max(1, min(self.concurrency, len(tasks) or 1))) as pool:
            results = list(pool.map(explorer.search, tasks))
        searched = [
            (
                task.intent,
                len(tried),
                tried[-1].exemplar() if tried and tried[-1].success and len(tried[-1].outputs) == 2 else None,
            )
            for task, tried in zip(tasks, results, strict=True)
        ]
        return tally_exploration(searched, started, self.sanitize)
