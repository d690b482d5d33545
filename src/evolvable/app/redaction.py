"""Exemplars a workload's explorer produces are shown to the model while it serves other users and stored
in the registry: they pass through the same redaction as recorded traffic (one map per exemplar).

With `surrogates` (the default) the common personal kinds become fictitious values of the same shape
instead of placeholders (`customer1@example.com`, not `<EMAIL_1>`: control/surrogates.py says why), one
per distinct value, the same in every message of the exemplar; the original value is removed either way.
"""

from __future__ import annotations

from collections.abc import Callable

from evolvable.control.surrogates import surrogate
from evolvable.governance.redaction import PlaceholderMap
from evolvable.protocol.harness import MemoryExemplar


class SurrogateMap(PlaceholderMap):
    """A placeholder map that answers with a fictitious value of the same kind where it has one."""

    __slots__ = ()

    def placeholder(self, kind: str, value: str) -> str:
        marker = super().placeholder(kind, value)  # `<KIND_n>`, numbered per kind, the same for the same value
        return surrogate(kind, int(marker.rsplit("_", 1)[1].rstrip(">"))) or marker


def exemplar_redactor(*, surrogates: bool = True) -> Callable[[MemoryExemplar], MemoryExemplar]:
    from evolvable.governance.redaction import RedactionEngine

    engine = RedactionEngine()

    def redact(exemplar: MemoryExemplar) -> MemoryExemplar:
        placeholders = SurrogateMap() if surrogates else PlaceholderMap()

        def clean(text: str) -> str:
            return engine.redact(text, placeholders).text

        return exemplar.model_copy(
            update={
                "task_input": clean(exemplar.task_input),
                "messages": [m.model_copy(update={"content": clean(m.text())}) for m in exemplar.messages],
            }
        )

    return redact
