"""Asserting that a number left the data, without tripping over random hex ids that happen to hold its digits."""

from __future__ import annotations

import re


def names_number(digits: str, text: str) -> bool:
    """Whether `digits` occurs in `text` as a number of its own, not inside a hex id (step and signal ids are
    random hex, so a bare substring check fails about once in a few hundred runs)."""
    return re.search(rf"(?<![0-9a-fA-F]){re.escape(digits)}(?![0-9a-fA-F])", text) is not None
