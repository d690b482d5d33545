"""Scores a redactor on a labeled corpus: recall per type and group, hard-negative damage, precision.

Span-based, so any engine can be scored the same way (ours, Presidio, detect-secrets): a planted value counts
as caught when detections cover at least 90% of its characters (a card with its last four digits left in the
clear is a miss; a PEM key with only its header line found is a miss); a hard negative counts as damaged when
any detection touches it. Precision counts detections that touch a planted value.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CAUGHT_FRACTION = 0.9
STRUCTURED_GROUPS = ("contact", "financial", "network", "credentials")


def load_corpus(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def _covered(start: int, end: int, detections: list[tuple[int, int]]) -> int:
    covered = 0
    for d_start, d_end in detections:
        lo, hi = max(start, d_start), min(end, d_end)
        if hi > lo:
            covered += hi - lo
    return covered


def score(records: Iterable[dict[str, Any]], detections: dict[str, list[tuple[int, int]]]) -> dict[str, Any]:
    """`detections` maps record id -> [(start, end)] found by the engine under test."""
    per_type: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    per_group: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    neg_total = neg_damaged = 0
    damaged_types: dict[str, int] = defaultdict(int)
    det_total = det_true = 0
    misses: list[dict[str, Any]] = []
    for record in records:
        found = sorted({(start, end) for start, end in detections.get(record["id"], [])})
        for span in record["spans"]:
            hit = _covered(span["start"], span["end"], found) >= CAUGHT_FRACTION * (span["end"] - span["start"])
            for table, key in ((per_type, span["type"]), (per_group, span["group"])):
                table[key][0] += hit
                table[key][1] += 1
            if not hit and len(misses) < 200:
                misses.append(
                    {"id": record["id"], "type": span["type"], "value": record["text"][span["start"] : span["end"]]}
                )
        for neg in record["negatives"]:
            neg_total += 1
            if _covered(neg["start"], neg["end"], found):
                neg_damaged += 1
                damaged_types[neg["type"]] += 1
        for d_start, d_end in found:
            det_total += 1
            det_true += any(_covered(s["start"], s["end"], [(d_start, d_end)]) for s in record["spans"])
    structured = [per_group[g] for g in STRUCTURED_GROUPS if g in per_group]
    caught = sum(c for c, _ in structured)
    total = sum(t for _, t in structured)
    return {
        "recall_structured": caught / total if total else None,
        "recall_by_group": {g: c / t for g, (c, t) in sorted(per_group.items())},
        "recall_by_type": {k: c / t for k, (c, t) in sorted(per_type.items())},
        "planted": {k: t for k, (_, t) in sorted(per_type.items())},
        "hard_negatives": neg_total,
        "damage": neg_damaged / neg_total if neg_total else 0.0,
        "damaged_by_type": dict(sorted(damaged_types.items())),
        "precision": det_true / det_total if det_total else None,
        "detections": det_total,
        "misses": misses,
    }
