"""The redaction engine: run recognizers, resolve overlaps, replace findings with typed placeholders.

Fail closed: when a recognizer raises, the whole text becomes `<REDACTION_FAILED>` and the failure hook is
called, so an engine bug can cost data but never leak it (a proxy guardrail that failed open once forwarded
raw PII when its analyzer errored).
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evolvable.errors import RedactionFailed
from evolvable.governance.redaction.recognizers import Finding, Recognizer, default_recognizers, key_kind
from evolvable.governance.redaction.recognizers import secret_value_ok as _secret_value_ok

FAILED_MARKER = "<REDACTION_FAILED>"

FailureHook = Callable[[str, BaseException], None]
"""`on_failure(kind, error)`: kind names the stage that raised (a recognizer's kind, or 'json', 'event')."""

log = logging.getLogger("evolvable.governance.redaction")


def _log_failure(kind: str, error: BaseException) -> None:
    log.error("redaction stage %s failed: %s: %s", kind, type(error).__name__, error)


def _digits(value: str) -> str:
    return "".join(c for c in value if c.isdigit())


def _phone_key(value: str) -> str:
    digits = _digits(value)
    return digits[1:] if len(digits) == 11 and digits[0] == "1" else digits


_NORMALIZERS: dict[str, Callable[[str], str]] = {
    "EMAIL": str.lower,
    "PHONE": _phone_key,
    "CREDIT_CARD": _digits,
    "SSN": _digits,
    "IBAN": lambda s: s.replace(" ", "").upper(),
}


class PlaceholderMap:
    """Value -> placeholder for one trajectory: the same email is `<EMAIL_1>` in every step.

    Lives in memory only; the mapping is never persisted (it would be a re-identification table).
    """

    __slots__ = ("_by_value", "_counts")

    def __init__(self) -> None:
        self._by_value: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}

    def placeholder(self, kind: str, value: str) -> str:
        key = (kind, _NORMALIZERS.get(kind, str)(value))
        found = self._by_value.get(key)
        if found is None:
            n = self._counts.get(kind, 0) + 1
            self._counts[kind] = n
            found = self._by_value[key] = f"<{kind}_{n}>"
        return found

    def __len__(self) -> int:
        return len(self._by_value)


@dataclass(frozen=True, slots=True)
class Redaction:
    text: str
    findings: list[Finding] = field(default_factory=list)
    failed: bool = False

    @property
    def changed(self) -> bool:
        return self.failed or bool(self.findings)


def resolve_overlaps(findings: list[Finding]) -> list[Finding]:
    """Keeps the highest-priority (then longest) finding of each overlapping group, in text order (O(n log n))."""
    if len(findings) <= 1:
        return findings
    ranked = sorted(findings, key=lambda f: (-f.priority, f.start - f.end, f.start))
    starts: list[int] = []  # kept findings, sorted by start; they never overlap each other
    kept: list[Finding] = []
    for f in ranked:
        i = bisect.bisect_left(starts, f.start)
        if i < len(kept) and kept[i].start < f.end:
            continue  # the next kept finding starts inside f
        if i > 0 and kept[i - 1].end > f.start:
            continue  # the previous kept finding reaches into f
        starts.insert(i, f.start)
        kept.insert(i, f)
    return kept


class RedactionEngine:
    """Finds PII and secrets and replaces them with typed, trajectory-consistent placeholders.

    `recognizers` defaults to every structured recognizer; `person_names=True` adds the optional spaCy NER
    stage (only when spaCy and an English model are installed; off by default because it costs ~100x).
    """

    def __init__(
        self,
        recognizers: Sequence[Recognizer] | None = None,
        *,
        on_failure: FailureHook | None = None,
        person_names: bool = False,
        ner_model: str | None = None,
    ) -> None:
        self.recognizers: list[Recognizer] = list(default_recognizers() if recognizers is None else recognizers)
        if person_names:
            from evolvable.governance.redaction.ner import SpacyPersonRecognizer

            self.recognizers.append(SpacyPersonRecognizer(ner_model))
        self.on_failure: FailureHook = on_failure or _log_failure
        self._plan = _keyword_plan(self.recognizers)
        self._always = [step for step in self._plan[0] if step[1] is None and step[2] is None]

    # ----------------------------------------------------------------- text

    def find(self, text: str) -> list[Finding]:
        """Non-overlapping findings in text order. Raises RedactionFailed (after calling the hook) if a stage raises."""
        if not text:
            return []
        lowered = text.lower()
        plan, exact_all, lower_all = self._plan
        # gitleaks-style pre-filter: each distinct keyword is tested once with a C substring search; a recognizer
        # none of whose keywords occurs cannot match, so it does not run
        exact_hits = _present(exact_all, text)
        lower_hits = _present(lower_all, lowered)
        found: list[Finding] = []
        for recognizer, exact, lower in plan if (exact_hits or lower_hits) else self._always:
            if exact is not None and exact.isdisjoint(exact_hits):
                continue
            if lower is not None and lower.isdisjoint(lower_hits):
                continue
            try:
                found.extend(recognizer.find(text, lowered))
            except Exception as err:
                self.report_failure(getattr(recognizer, "kind", type(recognizer).__name__), err)
                raise RedactionFailed(f"recognizer {getattr(recognizer, 'kind', recognizer)!r} failed") from err
        return resolve_overlaps(found)

    def redact(self, text: str, placeholders: PlaceholderMap | None = None) -> Redaction:
        try:
            findings = self.find(text)
        except RedactionFailed:
            return Redaction(FAILED_MARKER, failed=True)
        if not findings:
            return Redaction(text)
        return Redaction(
            apply_findings(text, findings, placeholders if placeholders is not None else PlaceholderMap()), findings
        )

    def redact_text(self, text: str, placeholders: PlaceholderMap | None = None) -> str:
        return self.redact(text, placeholders).text

    # ----------------------------------------------------------------- JSON-shaped values

    def redact_json_text(self, text: str, placeholders: PlaceholderMap | None = None) -> Redaction:
        """Redacts a JSON document given as text (tool-call arguments) and keeps it valid JSON.

        Redacting the raw text keeps the key context (`"password": ...`) and the original formatting; if that
        ever produced invalid JSON, the parsed value is walked instead and re-serialized.
        """
        placeholders = placeholders if placeholders is not None else PlaceholderMap()
        result = self.redact(text, placeholders)
        if result.failed or not result.findings:
            return result
        try:
            json.loads(result.text)
            return result
        except ValueError:
            pass
        try:
            value = json.loads(text)
        except ValueError:
            return result  # it was not JSON to begin with: plain-text redaction is the answer
        walked, changed = self.redact_value(value, placeholders)
        return Redaction(json.dumps(walked, ensure_ascii=False), result.findings if changed else [])

    def redact_value(
        self, value: Any, placeholders: PlaceholderMap | None = None, key: str | None = None
    ) -> tuple[Any, bool]:
        """Redacts every string (and long integer) inside a JSON-like value; returns (new value, changed).

        `key` is the dict key the value sits under: a value under `password` or `api_key` is a secret even though
        the value alone would not look like one.
        """
        placeholders = placeholders if placeholders is not None else PlaceholderMap()
        if isinstance(value, str):
            if key is not None and value and (kind := key_kind(key)) is not None and _secret_value_ok(kind, value):
                specific = self.redact(value, placeholders)
                if specific.failed or (
                    len(specific.findings) == 1 and specific.findings[0].end - specific.findings[0].start == len(value)
                ):
                    return specific.text, True
                return placeholders.placeholder("SECRET", value), True
            if value[:1] in "{[" and value[-1:] in "}]":
                result = self.redact_json_text(value, placeholders)
            else:
                result = self.redact(value, placeholders)
            return result.text, result.changed
        if isinstance(value, bool) or value is None:
            return value, False
        numeric_password = isinstance(value, int | float) and key is not None and key_kind(key) == "password"
        if numeric_password and _secret_value_ok("password", str(value)):  # `{"pwd": 48151623}` is a secret too
            return placeholders.placeholder("SECRET", str(value)), True
        if isinstance(value, float):
            return value, False
        if isinstance(value, int):
            if abs(value) < 10**8:
                return value, False
            result = self.redact(str(value), placeholders)
            return (result.text, True) if result.changed else (value, False)
        if isinstance(value, dict):
            changed = False
            out: dict[Any, Any] = {}
            for k, item in value.items():
                new_key, key_changed = self.redact_value(k, placeholders) if isinstance(k, str) else (k, False)
                if key_changed and new_key in out:  # two keys redacted to the same text: keep both entries
                    new_key = f"{new_key}#{len(out)}"
                new_item, item_changed = self.redact_value(item, placeholders, k if isinstance(k, str) else None)
                out[new_key] = new_item
                changed = changed or key_changed or item_changed
            return out, changed
        if isinstance(value, list | tuple):
            items = [self.redact_value(item, placeholders) for item in value]
            return [i for i, _ in items], any(c for _, c in items)
        return value, False

    # ----------------------------------------------------------------- failures

    def report_failure(self, kind: str, error: BaseException) -> None:
        """Calls the failure hook; a hook that raises is logged, never propagated."""
        try:
            self.on_failure(kind, error)
        except Exception:  # the hook must never turn a closed failure into an open one
            log.exception("redaction failure hook raised")


_Probes = tuple[tuple[str, tuple[str, ...]], ...]
_Plan = tuple[list[tuple[Recognizer, frozenset[str] | None, frozenset[str] | None]], _Probes, _Probes]


def _keyword_plan(recognizers: Sequence[Recognizer]) -> _Plan:
    """Every distinct keyword (case-sensitive ones, lower-case ones) once; per recognizer, its keyword sets."""
    plan = [
        (r, frozenset(getattr(r, "exact_keywords", ())) or None, frozenset(getattr(r, "keywords", ())) or None)
        for r in recognizers
    ]
    exact_all = _probes({k for r in recognizers for k in getattr(r, "exact_keywords", ())})
    lower_all = _probes({k for r in recognizers for k in getattr(r, "keywords", ())})
    return plan, exact_all, lower_all


def _probes(keywords: set[str]) -> _Probes:
    """Keywords sharing their first two characters are searched only when that prefix occurs (`gh` for the five
    `gh?_` GitHub prefixes): `(prefix, group)`, or `(keyword, ())` for a keyword alone in its group."""
    groups: dict[str, list[str]] = {}
    for k in sorted(keywords):
        groups.setdefault(k[:2], []).append(k)
    return tuple((prefix, tuple(g)) if len(g) > 1 else (g[0], ()) for prefix, g in groups.items())


def _present(probes: _Probes, text: str) -> set[str]:
    """The keywords that occur in `text` (each a C substring search, skipped when its group's prefix is absent)."""
    hits: set[str] = set()
    for gate, group in probes:
        if gate in text:
            if not group:
                hits.add(gate)
                continue
            for k in group:
                if k in text:
                    hits.add(k)
    return hits


def apply_findings(text: str, findings: Sequence[Finding], placeholders: PlaceholderMap) -> str:
    parts: list[str] = []
    pos = 0
    for f in findings:
        parts.append(text[pos : f.start])
        parts.append(placeholders.placeholder(f.kind, text[f.start : f.end]))
        pos = f.end
    parts.append(text[pos:])
    return "".join(parts)


_default_engine: RedactionEngine | None = None


def default_engine() -> RedactionEngine:
    global _default_engine
    if _default_engine is None:
        _default_engine = RedactionEngine()
    return _default_engine


def redact_text(text: str, placeholders: PlaceholderMap | None = None) -> str:
    """Redacts one text with the default engine (a fresh placeholder map unless one is given)."""
    return default_engine().redact_text(text, placeholders)


__all__ = [
    "FAILED_MARKER",
    "FailureHook",
    "PlaceholderMap",
    "Redaction",
    "RedactionEngine",
    "apply_findings",
    "default_engine",
    "redact_text",
    "resolve_overlaps",
]
