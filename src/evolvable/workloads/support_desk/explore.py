"""Exploration by replay: search recorded tickets in the replayable back office for verified successes.

A 135M model answers most tickets 0-shot in prose, and pushed into the action format it picks tools at
random and invents ids ("12345"): in development probes sampling found nothing to learn from (0 of 40
tool-needing episodes at temperature 1 on the default harness; with a forced `{"tool": "` prefix, 2 of
36 and those with gibberish text). The environment is cheap to replay and the verifier is exact, so the explorer
searches instead, breadth-first over short tool sequences:

- tools come from the harness (the schema's enum); a sequence ends when the environment says the
  episode is over (a reply, an escalation) or at `max_turns`;
- identifier arguments (`*_id`, numbers, emails) take the first matching value in the conversation's
  user turns (the ticket, then tool results): grounded, never invented;
- free-text arguments (the reply, a reason, an address) are written by the model, continuing a
  forced prefix that opens the JSON string (vLLM's `continue_final_message`), one sentence long:
  greedily first, then up to `text_samples - 1` sampled rewrites of the last turn's text when the
  plan failed on a check the text decides (a reply that does not mention the order's status).

Open plans are extended only while every step makes progress. The first verified, safe and clean
(every step made progress) success with the full reward ends a ticket's search; a lesser success (an
optional check skipped) is kept as the fallback while the search goes on within its budget.
Successes become memory exemplars that teach the unconstrained agent; whether they do is measured
by the replay gate on held-out tickets the explorer never saw.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import openai

from evolvable.governance.redaction.live_values import live_values as conversation_values
from evolvable.protocol.harness import Harness, LiveValues, MemoryExemplar, ToolSpec, render_messages
from evolvable.protocol.models import ChatMessage
from evolvable.workloads.runner import continue_prefill, prefill_wire
from evolvable.workloads.support_desk.environment import SupportDeskEnv
from evolvable.workloads.support_desk.harnesses import exemplar_from_outputs
from evolvable.workloads.support_desk.tasks import Task
from evolvable.workloads.support_desk.verifiers import Verdict, verify

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_IDENTIFIER = re.compile(r"(?<![\w.-])#?([A-Z]{0,4}-?\d{4,})(?![\w-])")


@dataclass
class Exploration:
    """One explored episode: the actions written, the verdict, and the exemplar it makes if it succeeded."""

    task_id: str
    cluster: str
    outputs: list[str]
    verdict: Verdict
    error: str | None = None
    wrote_text: bool = False
    """Some argument was written by the model (not grounded), so another text sample may change the verdict."""

    @property
    def clean(self) -> bool:
        """Safe, and every step made progress (no redundant, wrong or failed call)."""
        return self.verdict.safety.passed and all(step.value > 0 for step in self.verdict.steps)

    @property
    def success(self) -> bool:
        """Verified and clean, so the exemplar shows no detour the agent would copy."""
        return self.verdict.success and self.clean

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
        temperature: float = 0.8,
        text_samples: int = 3,
        max_turns: int = 3,
        max_text_tokens: int = 24,
        max_episodes: int = 16,
        seed: int = 0,
        parallel: int = 8,
        live_values: LiveValues | None = conversation_values,
    ) -> None:
        """`parallel`: greedy episodes of one search depth run at once (1: one by one). `live_values` renders
        exemplars as the agent does (`run_episode`), so what the search finds is what the agent would do."""
        if not harness.tools:
            raise ValueError("exploration needs a harness with tools")
        self.client = client
        self.model = model
        self.harness = harness
        self.live_values = live_values
        self.temperature = temperature
        self.text_samples = max(1, text_samples)
        self.max_turns = max_turns
        self.max_text_tokens = max_text_tokens
        self.max_episodes = max_episodes
        self.seed = seed
        self.parallel = max(1, parallel)
        self._written: dict[str, str] = {}

    def _write(self, messages: list[ChatMessage], prefix: str, sample: int) -> str:
        """The model's continuation of a prefilled assistant message, up to the closing quote (memoised:
        longer plans replay their prefix's turns)."""
        wire = prefill_wire(messages, prefix)
        key = hashlib.sha256(json.dumps([wire, sample], sort_keys=True).encode()).hexdigest()
        if key in self._written:
            return self._written[key]
        text = continue_prefill(
            self.client,
            self.model,
            wire,
            max_tokens=self.max_text_tokens,
            temperature=0.0 if sample == 0 else self.temperature,
            seed=self.seed + sample,
        )
        self._written[key] = text
        return text

    def _action(
        self, tool: ToolSpec, messages: list[ChatMessage], conversation: list[ChatMessage], sample: int
    ) -> tuple[str, bool]:
        """The action's JSON, and whether the model wrote any of its arguments."""
        values = grounded_values(conversation)
        wrote = False
        args: dict[str, str] = {}
        for name, spec in tool.parameters.get("properties", {}).items():
            kind = argument_kind(name, spec)
            if kind != "text" and values[kind]:
                args[name] = values[kind][0]
                continue
            opened = json.dumps({"tool": tool.name, "args": args}, ensure_ascii=False)[:-2]  # drop the closing '}}'
            written = self._write(messages, opened + (', "' if args else '"') + name + '": "', sample)
            args[name] = written.strip() or "..."
            wrote = True
        return json.dumps({"tool": tool.name, "args": args}, ensure_ascii=False), wrote

    def _run(self, task: Task, plan: Sequence[ToolSpec], sample: int = 0) -> tuple[Exploration, bool]:
        """Play `plan` (the model's texts: greedy for sample 0, sampled otherwise); also says whether the
        episode is still open (the plan can be extended). Earlier turns of a plan keep their greedy text."""
        env = SupportDeskEnv(task)
        conversation = [ChatMessage(role="user", content=task.prompt())]
        outputs: list[str] = []
        wrote_text = False
        for step, tool in enumerate(plan):
            messages = render_messages(
                self.harness, conversation, task_text=task.prompt(), cluster=task.cluster, live_values=self.live_values
            )
            action, wrote = self._action(tool, messages, conversation, sample if step == len(plan) - 1 else 0)
            wrote_text |= wrote
            outputs.append(action)
            turn = env.step(action)
            conversation.append(ChatMessage(role="assistant", content=action))
            if env.done:
                break
            conversation.append(ChatMessage(role="user", content=turn.observation))
        episode = Exploration(task.id, task.cluster, outputs, verify(task, env.turns), wrote_text=wrote_text)
        return episode, not env.done

    def search(self, task: Task) -> list[Exploration]:
        """Episodes tried for the ticket, in search order, except that the best success (if any was found)
        is moved last. A success with the full reward ends the search at once; one that skipped an optional
        check (a refund without looking the order up first) is kept while the search goes on for a complete
        one within the budget: the agent copies whatever process the exemplar shows.
        """
        tried: list[Exploration] = []
        best: Exploration | None = None
        frontier: list[list[ToolSpec]] = [[]]
        # The greedy episodes of one depth are independent: they run at once (one search alone leaves the
        # serving engine's batch nearly empty) and are then read in search order, as if run one by one.
        pool = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="evolvable-explore")
        try:
            for _depth in range(self.max_turns):
                extended: list[list[ToolSpec]] = []
                plans = [[*prefix, tool] for prefix in frontier for tool in self.harness.tools]
                greedy = [pool.submit(self._run, task, plan, 0) for plan in plans]
                for plan, first in zip(plans, greedy, strict=True):
                    for sample in range(self.text_samples):
                        if len(tried) >= self.max_episodes:
                            return _best_last(tried, best)
                        try:
                            episode, still_open = first.result() if sample == 0 else self._run(task, plan, sample)
                        except openai.OpenAIError as err:
                            error = f"{type(err).__name__}: {err}"
                            tried.append(Exploration(task.id, task.cluster, [], verify(task, []), error))
                            return _best_last(tried, best)
                        if still_open:
                            # only a plan whose every step made progress is worth extending
                            if len(plan) < self.max_turns and episode.clean:
                                extended.append(plan)
                            break
                        tried.append(episode)
                        if episode.success:
                            if episode.verdict.reward >= _FULL_REWARD:
                                return tried
                            if best is None or episode.verdict.reward > best.verdict.reward:
                                best = episode
                            break
                        if not _text_can_help(episode):
                            break
                frontier = extended
            return _best_last(tried, best)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # running episodes end; queued ones never start


_FULL_REWARD = 1.0 - 1e-9


def _best_last(tried: list[Exploration], best: Exploration | None) -> list[Exploration]:
    if best is not None and tried[-1] is not best:
        tried.remove(best)
        tried.append(best)
    return tried


def _text_can_help(episode: Exploration) -> bool:
    """Another sample of the model's text can only fix a plan whose every step made progress (right tools,
    right targets, safe) and that still failed: then a check on the text decided it."""
    return episode.wrote_text and all(step.value > 0 for step in episode.verdict.steps)
