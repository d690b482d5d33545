"""Exploration by replay: search recorded tickets in the replayable back office for verified successes.

A 135M model answers most tickets 0-shot in prose, and pushed into the action format it picks tools at
random and invents ids ("12345"): sampling finds nothing to learn from (0 of 40 tool-needing episodes
at temperature 1 on the default harness; with a forced `{"tool": "` prefix, 2 of 36 and those with
gibberish text). The environment is cheap to replay and the verifier is exact, so the explorer
searches instead, breadth-first over short tool sequences:

- tools come from the harness (the schema's enum); a sequence ends when the environment says the
  episode is over (a reply, an escalation) or at `max_turns`;
- identifier arguments (`*_id`, numbers, emails) take the first matching value in the conversation's
  user turns (the ticket, then tool results): grounded, never invented;
- free-text arguments (the reply, a reason, an address) are written by the model, continuing a
  forced prefix that opens the JSON string (vLLM's `continue_final_message`), greedily and one
  sentence long.

The first verified, safe success of a ticket ends its search. Successes become memory exemplars that
teach the unconstrained agent; whether they do is measured by the replay gate on held-out tickets
the explorer never saw.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import openai

from evolvable.protocol.harness import Harness, MemoryExemplar, ToolSpec, render_messages
from evolvable.protocol.models import ChatMessage
from evolvable.workloads.support_desk.environment import SupportDeskEnv
from evolvable.workloads.support_desk.harnesses import exemplar_from_outputs
from evolvable.workloads.support_desk.tasks import Task
from evolvable.workloads.support_desk.verifiers import Verdict, verify

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_IDENTIFIER = re.compile(r"(?<![\w.-])#?([A-Z]{0,4}-?\d{4,})(?![\w-])")
_TEXT_STOPS = ('"', "\n", ".", "!", "?")
"""Free text ends at its closing quote or its first sentence: a worked example the model will copy
must be short; long model text rambles, repeats itself and overruns the token limit when copied."""


@dataclass
class Exploration:
    """One explored episode: the actions written, the verdict, and the exemplar it makes if it succeeded."""

    task_id: str
    cluster: str
    outputs: list[str]
    verdict: Verdict
    error: str | None = None

    @property
    def success(self) -> bool:
        return self.verdict.success and self.verdict.safety.passed

    def exemplar(self, task: Task) -> MemoryExemplar:
        ex = exemplar_from_outputs(task, self.outputs, exemplar_id=f"ex-explored-{task.id}-{len(self.outputs)}")
        return ex.model_copy(update={"reward": self.verdict.reward})


def argument_kind(name: str, spec: dict[str, Any]) -> str:
    """`email`, `identifier` (drawn from the conversation) or `text` (written by the model)."""
    description = str(spec.get("description", "")).lower()
    if "email" in name.lower():
        return "email"
    if name == "id" or name.endswith("_id") or "number" in description:
        return "identifier"
    return "text"


def grounded_values(conversation: Sequence[ChatMessage]) -> dict[str, list[str]]:
    """Identifier and email values that occur in the user turns, in order of first appearance."""
    text = "\n".join(m.text() for m in conversation if m.role == "user")
    emails = list(dict.fromkeys(_EMAIL.findall(text)))
    without_emails = _EMAIL.sub(" ", text)
    identifiers = list(dict.fromkeys(_IDENTIFIER.findall(without_emails)))
    return {"email": emails, "identifier": identifiers}


class SearchExplorer:
    """Breadth-first search over tool sequences for one ticket; the model writes every free-text argument."""

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        harness: Harness,
        *,
        temperature: float = 0.0,
        max_turns: int = 3,
        max_text_tokens: int = 24,
        max_episodes: int = 16,
        seed: int = 0,
    ) -> None:
        if not harness.tools:
            raise ValueError("exploration needs a harness with tools")
        self.client = client
        self.model = model
        self.harness = harness
        self.temperature = temperature
        self.max_turns = max_turns
        self.max_text_tokens = max_text_tokens
        self.max_episodes = max_episodes
        self.seed = seed
        self._written: dict[str, str] = {}

    def _write(self, messages: list[ChatMessage], prefix: str, seed: int) -> str:
        """The model's continuation of a prefilled assistant message, up to the closing quote (memoised:
        longer plans replay their prefix's turns)."""
        wire: list[dict[str, Any]] = [m.model_dump(exclude_none=True) for m in messages]
        wire.append({"role": "assistant", "content": prefix})
        key = hashlib.sha256(json.dumps([wire, seed], sort_keys=True).encode()).hexdigest()
        if key in self._written:
            return self._written[key]
        completion = self.client.chat.completions.create(
            model=self.model,
            messages=wire,  # type: ignore[arg-type]
            temperature=self.temperature,
            max_tokens=self.max_text_tokens,
            seed=seed,
            stop=list(_TEXT_STOPS),
            extra_body={"continue_final_message": True, "add_generation_prompt": False},
        )
        text = (completion.choices[0].message.content or "") if completion.choices else ""
        text = text.strip()
        if text and text[-1].isalnum():
            text += "."
        self._written[key] = text
        return text

    def _action(self, tool: ToolSpec, messages: list[ChatMessage], conversation: list[ChatMessage], seed: int) -> str:
        values = grounded_values(conversation)
        args: dict[str, str] = {}
        for name, spec in tool.parameters.get("properties", {}).items():
            kind = argument_kind(name, spec)
            if kind != "text" and values[kind]:
                args[name] = values[kind][0]
                continue
            opened = json.dumps({"tool": tool.name, "args": args}, ensure_ascii=False)[:-2]  # drop the closing '}}'
            written = self._write(messages, opened + (', "' if args else '"') + name + '": "', seed)
            args[name] = written.strip() or "..."
        return json.dumps({"tool": tool.name, "args": args}, ensure_ascii=False)

    def _run(self, task: Task, plan: Sequence[ToolSpec]) -> tuple[Exploration, bool]:
        """Play `plan`; also says whether the episode is still open (the plan can be extended)."""
        env = SupportDeskEnv(task)
        conversation = [ChatMessage(role="user", content=task.prompt())]
        outputs: list[str] = []
        for step, tool in enumerate(plan):
            messages = render_messages(self.harness, conversation, task_text=task.prompt(), cluster=task.cluster)
            action = self._action(tool, messages, conversation, self.seed + step)
            outputs.append(action)
            turn = env.step(action)
            conversation.append(ChatMessage(role="assistant", content=action))
            if env.done:
                break
            conversation.append(ChatMessage(role="user", content=turn.observation))
        return Exploration(task.id, task.cluster, outputs, verify(task, env.turns)), not env.done

    def search(self, task: Task) -> list[Exploration]:
        """Episodes tried for the ticket, in search order; the last one is the success, if any was found."""
        tried: list[Exploration] = []
        frontier: list[list[ToolSpec]] = [[]]
        for _depth in range(self.max_turns):
            extended: list[list[ToolSpec]] = []
            for prefix in frontier:
                for tool in self.harness.tools:
                    if len(tried) >= self.max_episodes:
                        return tried
                    plan = [*prefix, tool]
                    try:
                        episode, still_open = self._run(task, plan)
                    except openai.OpenAIError as err:
                        error = f"{type(err).__name__}: {err}"
                        tried.append(Exploration(task.id, task.cluster, [], verify(task, []), error))
                        return tried
                    if still_open:
                        if len(plan) < self.max_turns:
                            extended.append(plan)
                        continue
                    tried.append(episode)
                    if episode.success:
                        return tried
            frontier = extended
        return tried
