"""The live conversation's own values under the placeholders its redaction would give them.

Exemplars of the memory lever are redacted trajectories: `reset the password for <EMAIL_1>`. Shown as
they are, a small model copies `<EMAIL_1>` into its live action. `render_messages` shows an exemplar's
placeholders as the live conversation's values instead, and this computes them: the conversation is
pseudonymized as governance pseudonymizes a trajectory (one fresh `PlaceholderMap`, numbers by first
appearance, in message order), and the map is inverted. Every value it returns is one the live
conversation already holds, so no other person's data can reach the upstream this way.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, partial

from evolvable.errors import RedactionFailed
from evolvable.governance.redaction.engine import PlaceholderMap, RedactionEngine
from evolvable.protocol.harness import LiveValues, message_texts
from evolvable.protocol.models import ChatMessage


def placeholder_values(engine: RedactionEngine, conversation: Sequence[ChatMessage]) -> dict[str, str]:
    """`{"<EMAIL_1>": "bob@example.com", ...}` for the conversation's values, numbered by first appearance.

    A value seen again (`Bob@Example.com`, the same email normalized) keeps its first spelling. When a
    recognizer fails the answer is empty: exemplars then keep their placeholders (nothing is guessed)."""
    placeholders = PlaceholderMap()
    values: dict[str, str] = {}
    try:
        for message in conversation:
            for text in message_texts(message):
                for start, end, kind, _ in engine.find(text):
                    raw = text[start:end]
                    values.setdefault(placeholders.placeholder(kind, raw), raw)
    except RedactionFailed:
        return {}
    return values


def live_values_function(engine: RedactionEngine | None = None, *, person_names: bool = False) -> LiveValues:
    """The `LiveValues` callable for `render_messages` (and `HarnessRouter(live_values=...)`).

    Its engine keeps no findings cache: the values live for one request, never longer. Give it the
    recognizers governance redacts with (`person_names` as configured), or the numbers may not line up."""
    if engine is None:
        engine = RedactionEngine(person_names=person_names, cache=False)
    return partial(placeholder_values, engine)


@cache
def _default() -> LiveValues:
    """One engine with the default recognizers for every caller, built on first use."""
    return live_values_function()


def live_values(conversation: Sequence[ChatMessage]) -> dict[str, str]:
    """`placeholder_values` with the default recognizers (what governance redacts with by default)."""
    return dict(_default()(conversation))


__all__ = ["live_values", "live_values_function", "placeholder_values"]
