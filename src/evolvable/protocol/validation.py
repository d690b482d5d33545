"""Parse ATDP JSON / JSONL with errors a person can act on (located, one line each)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from evolvable.errors import ProtocolError
from evolvable.protocol.models import Trajectory


def describe(err: ValidationError) -> list[str]:
    """Turn pydantic's error list into 'steps.2.kind: reason' lines."""
    out = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"]) or "(root)"
        out.append(f"{loc}: {e['msg']}")
    return out


def parse_trajectory(data: str | bytes | dict[str, Any]) -> Trajectory:
    try:
        if isinstance(data, dict):
            return Trajectory.model_validate(data)
        return Trajectory.model_validate_json(data)
    except ValidationError as err:
        raise ProtocolError("invalid ATDP trajectory", describe(err)) from None


@dataclass
class LineResult:
    line: int
    trajectory: Trajectory | None
    reasons: list[str]


def iter_jsonl(lines: Iterable[str]) -> Iterator[LineResult]:
    """Validate each non-blank line; never stops at the first bad one."""
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            yield LineResult(n, parse_trajectory(raw), [])
        except ProtocolError as err:
            yield LineResult(n, None, err.reasons or [str(err)])


def load_file(text: str) -> list[LineResult]:
    """A JSON document (one trajectory or a list) or JSONL, detected by content."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as err:
            return [LineResult(err.lineno, None, [f"invalid JSON: {err.msg}"])]
        results = []
        for i, item in enumerate(items):
            try:
                results.append(LineResult(i + 1, parse_trajectory(item), []))
            except ProtocolError as perr:
                results.append(LineResult(i + 1, None, perr.reasons))
        return results
    if stripped.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            return list(iter_jsonl(text.splitlines()))  # JSONL: one object per line
        try:
            return [LineResult(1, parse_trajectory(doc), [])]
        except ProtocolError as perr:
            return [LineResult(1, None, perr.reasons)]
    return list(iter_jsonl(text.splitlines()))


TRAJECTORY_ADAPTER: TypeAdapter[Trajectory] = TypeAdapter(Trajectory)
