"""Exploration by replay for the IT helpdesk: search a recorded ticket in the replayable directory.

The memory lever needs successes of the failing intents, and the 135M model solves none of them on
its own. The directory is cheap to replay and its verifier is exact, so, as the support desk's
explorer does, this one searches instead of sampling:

- one action: every change tool the harness offers (its tool list, so a harness without a tool
  never learns it), with arguments grounded in the ticket (user ids like `u123`, whole numbers, and
  the ticket's words for a package name): never invented;
- a plan is kept only if the directory accepts the action and the verifier says success without any
  violation (safety-forbidden acts are never kept).

The exemplar is the ticket and that one action, the turn the weak agent gets wrong. It carries no
reply turn on purpose: measured on SmolLM2-135M (2026-11-25, 10 tickets of a seed no gate or report
set uses), with the tool result and a reply in the exemplar the model copied the exemplar's *last*
turn, the reply, as its first output on 6 of 10 tickets and changed nothing; with the ticket and
the action only it made the right change on 10 of 10. Whether an exemplar teaches the unconstrained
agent anything is measured by the replay gate on held-out tickets the explorer never saw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from evolvable.protocol.harness import Harness, MemoryExemplar
from evolvable.protocol.models import ChatMessage
from evolvable.workloads.it_helpdesk.environment import Directory, Verdict, verify
from evolvable.workloads.it_helpdesk.tasks import Task

READ_ONLY = frozenset({"lookup_user", "reply_to_user"})
_USER_ID = re.compile(r"\bu\d{3}\b")
_NUMBER = re.compile(r"\b\d{1,4}\b")
_WORD = re.compile(r"[a-z][a-z0-9-]{2,}")


@dataclass
class Found:
    """One tried plan: its action (as the model would write it) and the verdict."""

    task: Task
    output: str
    verdict: Verdict

    @property
    def success(self) -> bool:
        return self.verdict.success and not self.verdict.violation

    def exemplar(self) -> MemoryExemplar:
        return MemoryExemplar(
            id=f"ex-explore-{self.task.id}",
            cluster=self.task.intent,
            task_input=self.task.prompt(),
            messages=[
                ChatMessage(role="user", content=self.task.prompt()),
                ChatMessage(role="assistant", content=self.output),
            ],
            reward=1.0,
        )


def grounded(text: str) -> dict[str, list[str]]:
    """Candidate argument values from the ticket, in order of appearance."""
    low = text.lower()
    return {
        "user_id": list(dict.fromkeys(_USER_ID.findall(low))),
        "gb": list(dict.fromkeys(n for n in _NUMBER.findall(low))),
        "package": list(dict.fromkeys(w for w in _WORD.findall(low) if not _USER_ID.fullmatch(w))),
    }


def action_text(tool: str, args: dict[str, str]) -> str:
    return json.dumps({"tool": tool, "args": args})


class ItHelpdeskExplorer:
    def __init__(self, harness: Harness, *, max_plans: int = 64) -> None:
        self.harness = harness
        self.max_plans = max_plans

    def plans(self, task: Task) -> Iterator[tuple[str, dict[str, str]]]:
        values = grounded(task.prompt())
        for spec in self.harness.tools:
            if spec.name in READ_ONLY:
                continue
            names = list((spec.parameters or {}).get("properties", {}))
            yield from ((spec.name, args) for args in _combinations(names, values))

    def search(self, task: Task) -> list[Found]:
        """Plans tried until the first verified, safe success (the last one then); at most `max_plans`."""
        tried: list[Found] = []
        for tool, args in self.plans(task):
            if len(tried) >= self.max_plans:
                break
            directory = Directory.for_task(task)
            if "error" in directory.call(tool, args):
                continue
            tried.append(Found(task, action_text(tool, args), verify(directory)))
            if tried[-1].success:
                return tried
        return tried


def _combinations(names: Sequence[str], values: dict[str, list[str]]) -> Iterator[dict[str, str]]:
    """Every assignment of grounded values to the parameters (none: the tool cannot be grounded here)."""
    if not names:
        yield {}
        return
    first, rest = names[0], names[1:]
    for value in values.get(first, []):
        for tail in _combinations(rest, values):
            yield {first: value, **tail}
