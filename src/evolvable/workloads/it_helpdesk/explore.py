"""Exploration by replay for the IT helpdesk: search a recorded ticket in the replayable directory.

The memory lever needs successes of the failing intents, and the 135M model solves none of them on
its own. The directory is cheap to replay and its verifier is exact, so, as the support desk's
explorer does, this one searches instead of sampling:

- one action, then the reply: every change tool the harness offers (its tool list, so a harness
  without a tool never learns it), with arguments grounded in the ticket (user ids like `u123`,
  whole numbers, and the ticket's words for a package name): never invented;
- a plan is kept only if the directory accepts the action and the verifier, with a reply sent, says
  success without any violation (safety-forbidden acts are never kept);
- the reply's text is written by the model, continuing a forced `{"tool": "reply_to_user", "args":
  {"message": "` prefix (the server continues a final assistant message, as the embedded policy
  server and vLLM do), one sentence.

The exemplar is the episode as `run_episode` would show it: the ticket, the action, the tool result,
the reply, the reply written as prose (which the agent loop reads as `reply_to_user`). A small model
copies the last assistant turn it is shown, so shown whole such an exemplar taught the reply in place
of the action (measured on SmolLM2-135M, 2026-11-25: 6 of 10 tickets answered with the exemplar's
reply and changed nothing); the shared rendering therefore shows each exemplar up to the step the
conversation has reached (`protocol.harness.exemplar_up_to_step`): the action on the first turn, the
reply on the turn after the tool result. The reply is prose because, after its own JSON action, the
model began another JSON action and took the tool name from that action, not from the exemplar's
`reply_to_user` (`{"tool": "unlock_account", "args": {..., "message": "<the exemplar's reply>"}}`):
measured 2026-11-26 on 20 tickets of a seed no benchmark set uses, with one exemplar per ticket,
12/20 resolved with JSON replies (account unlocks and installs 0/4 each), 20/20 with prose replies.
Whether an exemplar teaches the unconstrained agent anything is measured by the replay gate on
held-out tickets the explorer never saw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import openai

from evolvable.protocol.harness import Harness, MemoryExemplar, render_messages
from evolvable.protocol.models import ChatMessage
from evolvable.workloads.it_helpdesk.environment import Directory, Verdict, verify
from evolvable.workloads.it_helpdesk.tasks import Task
from evolvable.workloads.runner import continue_prefill, prefill_wire

READ_ONLY = frozenset({"lookup_user", "reply_to_user"})
_USER_ID = re.compile(r"\bu\d{3}\b")
_NUMBER = re.compile(r"\b\d{1,4}\b")
_WORD = re.compile(r"[a-z][a-z0-9-]{2,}")
REPLY_PREFIX = '{"tool": "reply_to_user", "args": {"message": "'


@dataclass
class Found:
    """One tried plan: its actions (as the model would write them) and the verdict."""

    task: Task
    outputs: list[str]
    observations: list[str]
    verdict: Verdict

    @property
    def success(self) -> bool:
        return self.verdict.success and not self.verdict.violation

    def exemplar(self) -> MemoryExemplar:
        messages = [ChatMessage(role="user", content=self.task.prompt())]
        for output, observation in zip(self.outputs, [*self.observations, None], strict=False):
            messages.append(ChatMessage(role="assistant", content=output))
            if observation is not None:
                messages.append(ChatMessage(role="user", content=observation))
        return MemoryExemplar(
            id=f"ex-explore-{self.task.id}",
            cluster=self.task.intent,
            task_input=self.task.prompt(),
            messages=messages,
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
    def __init__(
        self, client: openai.OpenAI, model: str, harness: Harness, *, max_plans: int = 64, max_text_tokens: int = 24
    ) -> None:
        self.client = client
        self.model = model
        self.harness = harness
        self.max_plans = max_plans
        self.max_text_tokens = max_text_tokens

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
            result = directory.call(tool, args)
            if "error" in result:
                continue
            if not task.probe:  # would a reply after the change make this a success? (a probe asks for no change)
                directory.call("reply_to_user", {"message": "-"})
            verdict = verify(directory)
            found = Found(task, [action_text(tool, args)], [f"Tool result: {json.dumps(result)}"], verdict)
            tried.append(found)
            if not found.success:
                continue
            reply = self._reply(task, found)
            if not reply or "{" in reply:  # a reply holding an object would be read back as an action
                continue
            found.outputs.append(reply)
            return tried
        return tried

    def _reply(self, task: Task, found: Found) -> str:
        conversation = [ChatMessage(role="user", content=task.prompt())]
        conversation += [ChatMessage(role="assistant", content=found.outputs[0])]
        conversation += [ChatMessage(role="user", content=found.observations[0])]
        messages = render_messages(self.harness, conversation, task_text=task.prompt(), cluster=task.intent)
        return continue_prefill(
            self.client, self.model, prefill_wire(messages, REPLY_PREFIX), max_tokens=self.max_text_tokens
        )


def _combinations(names: Sequence[str], values: dict[str, list[str]]) -> Iterator[dict[str, str]]:
    """Every assignment of grounded values to the parameters (none: the tool cannot be grounded here)."""
    if not names:
        yield {}
        return
    first, rest = names[0], names[1:]
    for value in values.get(first, []):
        for tail in _combinations(rest, values):
            yield {first: value, **tail}
