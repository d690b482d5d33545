"""Fictitious stand-ins for redaction placeholders in memory exemplars.

An exemplar is a worked example the agent's model imitates. Recorded traffic is stored redacted
(`<EMAIL_1>` in both the ticket and the tool call), and a small model copies the literal placeholder
into its own call for the next customer (`reset_password(email="<EMAIL_1>")`), which nothing accepts.
So exemplars carry, for the common personal kinds, obviously fictitious values of the same shape
instead — one per placeholder, the same in every message of the exemplar (placeholders are numbered
per trajectory, so the mapping stays consistent). The original value was removed by redaction and is
never recovered; kinds without a stand-in (keys, card numbers, SSNs...) keep their placeholder.
"""

from __future__ import annotations

import re
from collections.abc import Callable

SURROGATES: dict[str, Callable[[int], str]] = {
    "EMAIL": lambda n: f"customer{n}@example.com",
    "PERSON": lambda n: "Customer" if n == 1 else f"Customer {n}",
    "ADDRESS": lambda n: f"{n} Example Street",
    "PHONE": lambda n: f"+1 555 0100 {n:03d}",
}
"""Stand-ins by placeholder kind: the reserved example domain, no real street, the 555-01xx fiction range."""

PLACEHOLDER = re.compile(r"<([A-Z][A-Z_]*?)_(\d+)>")


def surrogate(kind: str, number: int) -> str | None:
    make = SURROGATES.get(kind)
    return make(number) if make is not None else None


def with_surrogates(text: str) -> str:
    """`text` with every placeholder of a kind that has a stand-in replaced by it."""

    def swap(match: re.Match[str]) -> str:
        return surrogate(match.group(1), int(match.group(2))) or match.group(0)

    return PLACEHOLDER.sub(swap, text)
