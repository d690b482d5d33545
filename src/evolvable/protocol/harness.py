"""The harness: everything about an agent that can evolve without touching weights.

System prompt, skills, memory exemplars and tool descriptions are data, each a
separately diffable component. The control plane versions them, the proxy
applies them to live requests, and agents may fetch and apply them themselves;
both paths call `render_messages`, so they cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import Field

from evolvable.protocol.models import ChatMessage, StrictModel


class Skill(StrictModel):
    name: str
    description: str = ""
    instructions: str
    applies_to: list[str] = Field(default_factory=list, description="Task clusters or intents; empty means all.")


class MemoryExemplar(StrictModel):
    """A successful past run, shown to the model as a worked example."""

    id: str
    cluster: str | None = None
    task_input: str
    messages: list[ChatMessage] = Field(description="The user/assistant turns to replay as a few-shot example.")
    reward: float | None = None
    source_trajectory_id: str | None = None


class ToolSpec(StrictModel):
    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


def string_parameters(**described: str) -> dict[str, Any]:
    """A tool's JSON schema whose arguments are all required strings, each with its description."""
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": text} for name, text in described.items()},
        "required": list(described),
    }


class Harness(StrictModel):
    agent: str
    system_prompt: str = ""
    skills: list[Skill] = Field(default_factory=list)
    memory: list[MemoryExemplar] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    memory_k: int = Field(2, ge=0, description="How many exemplars are retrieved into each request.")
    render_tools_in_prompt: bool = Field(
        True, description="Describe tools in the system prompt (small models) rather than only in `tools`."
    )

    def content_hash(self) -> str:
        """Content address of the harness: equal content, equal version id."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return "h1-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def retrieve_memory(harness: Harness, task_text: str, cluster: str | None = None) -> list[MemoryExemplar]:
    """The k exemplars most similar to the task: same cluster first, then word overlap (Jaccard).

    A request of a known cluster never gets another cluster's worked example: a small model copies the
    actions it sees, so a refund exemplar shown to an out-of-policy refund ticket teaches the refund that
    the policy forbids. It gets its own cluster's exemplars and general ones (no cluster); a request of
    unknown cluster gets the most similar of all.
    """
    if harness.memory_k == 0 or not harness.memory:
        return []
    words = _words(task_text)
    pool = harness.memory if cluster is None else [ex for ex in harness.memory if ex.cluster in (cluster, None)]

    def score(ex: MemoryExemplar) -> tuple[int, float]:
        other = _words(ex.task_input)
        jac = len(words & other) / max(1, len(words | other))
        return (1 if cluster is not None and ex.cluster == cluster else 0, jac)

    return sorted(pool, key=score, reverse=True)[: harness.memory_k]


def render_system_prompt(harness: Harness, cluster: str | None = None) -> str:
    parts = [harness.system_prompt.strip()] if harness.system_prompt.strip() else []
    if harness.render_tools_in_prompt and harness.tools:
        lines = ["Tools:"]
        for t in harness.tools:
            props = t.parameters.get("properties", {}) if isinstance(t.parameters, dict) else {}
            args = ", ".join(props) if props else ""
            lines.append(f"- {t.name}({args}): {t.description}")
        parts.append("\n".join(lines))
    skills = [s for s in harness.skills if not s.applies_to or cluster is None or cluster in s.applies_to]
    if skills:
        parts.append("Skills:\n" + "\n".join(f"- {s.name}: {s.instructions}" for s in skills))
    return "\n\n".join(parts)


def exemplar_up_to_step(exemplar: MemoryExemplar, step: int) -> list[ChatMessage]:
    """The exemplar's turns up to and including its assistant turn number `step` (0-based); all of them
    when it has no such turn.

    A small model copies the most recent assistant turn it was shown, whatever the user turn that
    follows. An exemplar shown whole ends with its final answer, so on the first turn of a new task the
    model writes that answer and skips the work before it (measured on the support desk: 0 of 12 tickets
    that need a lookup, a reset or an update before the reply did the work, with exemplars of their own
    kind). Cut at the step the conversation has reached, the last assistant turn shown is the one to
    take now.
    """
    seen = 0
    for i, message in enumerate(exemplar.messages):
        if message.role == "assistant":
            if seen == step:
                return exemplar.messages[: i + 1]
            seen += 1
    return list(exemplar.messages)


PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_[0-9]+>")
"""A typed placeholder of governance's redaction (`<EMAIL_1>`, `<CREDIT_CARD_2>`): a kind, then a number
given by the value's first appearance in its trajectory."""

LiveValues = Callable[[Sequence[ChatMessage]], Mapping[str, str]]
"""The live conversation (its non-system messages, in order) -> `{"<EMAIL_1>": "bob@example.com", ...}`:
each value of the conversation under the placeholder the redaction of that conversation would give it.
Computed by the caller (governance owns the recognizers); the protocol layer only substitutes."""


def fill_placeholders(text: str, values: Mapping[str, str]) -> str:
    """`text` with each placeholder that has a value replaced by it; the others are left as they are."""
    return PLACEHOLDER.sub(lambda m: values.get(m.group(0), m.group(0)), text)


def message_texts(message: ChatMessage) -> list[str]:
    """A message's texts in the order redaction visits them: its content, then its native tool calls' arguments
    (agents on the tools API act through those)."""
    return [message.text(), *(call.function.arguments for call in message.tool_calls or () if call.function.arguments)]


def _filled_content(content: Any, values: Mapping[str, str]) -> Any:
    if isinstance(content, str):
        return fill_placeholders(content, values)
    if isinstance(content, list):
        return [
            {**part, "text": fill_placeholders(part["text"], values)}
            if isinstance(part, dict) and isinstance(part.get("text"), str)
            else part
            for part in content
        ]
    return content


def _with_values(message: ChatMessage, values: Mapping[str, str]) -> ChatMessage:
    """The assistant turn with its placeholders filled: in its content and in its tool calls' arguments."""
    calls = [
        call.model_copy(
            update={
                "function": call.function.model_copy(
                    update={"arguments": fill_placeholders(call.function.arguments, values)}
                )
            }
        )
        for call in message.tool_calls or ()
    ]
    update: dict[str, Any] = {"content": _filled_content(message.content, values)}
    if message.tool_calls:
        update["tool_calls"] = calls
    return message.model_copy(update=update)


def render_messages(
    harness: Harness,
    conversation: list[ChatMessage],
    task_text: str | None = None,
    cluster: str | None = None,
    live_values: LiveValues | None = None,
) -> list[ChatMessage]:
    """Apply the harness to a conversation: one system message, retrieved exemplars, then the
    conversation without its own system messages (the harness owns the system prompt).

    Each exemplar is shown up to the step the conversation has reached (`exemplar_up_to_step`): as many
    assistant turns as the conversation has, plus the one to take next.

    Exemplars come from redacted trajectories, so they hold placeholders (`<EMAIL_1>`), and a small model
    copies them literally into its own action (`reset_password {"email": "<EMAIL_1>"}`, 3 of 3 measured on
    the support desk with SmolLM2-135M). With `live_values`, each placeholder in an exemplar's assistant
    turns (the actions the model copies) that the live conversation has a value for (same kind, same
    number by first appearance) is shown as that value; only values already in the live conversation are
    ever shown. The exemplar's user turns keep their placeholders: filled with the live customer's name
    and email too, the ticket read as the live one and the model took another action on 3 of 6 order
    status tickets (benchmarks/exemplar_values.py). `live_values` is called only when an assistant turn
    shown holds a placeholder."""
    if task_text is None:
        task_text = next((m.text() for m in conversation if m.role == "user"), "")
    step = sum(1 for m in conversation if m.role == "assistant")
    dialogue = [m for m in conversation if m.role not in ("system", "developer")]
    shown = [exemplar_up_to_step(ex, step) for ex in retrieve_memory(harness, task_text, cluster)]
    if live_values is not None and any(
        m.role == "assistant" and PLACEHOLDER.search(text)
        for turns in shown
        for m in turns
        for text in message_texts(m)
    ):
        values = live_values(dialogue)
        if values:
            shown = [[_with_values(m, values) if m.role == "assistant" else m for m in turns] for turns in shown]
    out = [ChatMessage(role="system", content=render_system_prompt(harness, cluster))]
    for turns in shown:
        out.extend(turns)
    out.extend(dialogue)
    return out
