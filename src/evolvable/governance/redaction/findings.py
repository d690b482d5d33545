"""What every recognizer produces (`Finding`) and the boundary test the split-out recognizers share.

Its own module so that `recognizers` (which assembles the default set) and the recognizers it assembles
(`names`, `addresses`, `phones`) both import it, and neither imports the other's importer."""

from __future__ import annotations

from typing import NamedTuple


class Finding(NamedTuple):
    """A span to redact, its kind, and the priority that settles overlaps. A named tuple: immutable like a
    frozen dataclass, and several times cheaper to create (a text can yield dozens of candidates)."""

    start: int
    end: int
    kind: str
    priority: int = 50


_GLUE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./+-")
"""Characters that glue a value to the word before it (so a match inside a longer token is not a value)."""


def free_left(text: str, start: int, glue: frozenset[str] = _GLUE) -> bool:
    if start == 0 or text[start - 1] not in glue:
        return True
    return start >= 2 and text[start - 2] == "\\" and text[start - 1] in "nrt"
