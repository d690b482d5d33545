"""Exemplars a workload's explorer produces are shown to the model while it serves other users and stored
in the registry: they pass through the same redaction as recorded traffic (one placeholder map each)."""

from __future__ import annotations

from collections.abc import Callable

from evolvable.protocol.harness import MemoryExemplar


def exemplar_redactor() -> Callable[[MemoryExemplar], MemoryExemplar]:
    from evolvable.governance.redaction import PlaceholderMap, RedactionEngine

    engine = RedactionEngine()

    def redact(exemplar: MemoryExemplar) -> MemoryExemplar:
        placeholders = PlaceholderMap()

        def clean(text: str) -> str:
            return engine.redact(text, placeholders).text

        return exemplar.model_copy(
            update={
                "task_input": clean(exemplar.task_input),
                "messages": [m.model_copy(update={"content": clean(m.text())}) for m in exemplar.messages],
            }
        )

    return redact
