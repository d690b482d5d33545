"""The redaction engine: run recognizers, resolve overlaps, replace findings with typed placeholders.

Fail closed: when a recognizer raises, the whole text becomes `<REDACTION_FAILED>` and the failure hook is
called, so an engine bug can cost data but never leak it (a proxy guardrail that failed open once forwarded
raw PII when its analyzer errored).
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ahocorasick_rs import AhoCorasick
from mypy_extensions import mypyc_attr

from evolvable.errors import RedactionFailed
from evolvable.governance.redaction.findings import Finding
from evolvable.governance.redaction.recognizers import Recognizer, default_recognizers, key_kind
from evolvable.governance.redaction.recognizers import secret_value_ok as _secret_value_ok
from evolvable.governance.redaction.validators import digits_of
from evolvable.telemetry.metrics import REDACTIONS

FAILED_MARKER = "<REDACTION_FAILED>"

FailureHook = Callable[[str, BaseException], None]
"""`on_failure(kind, error)`: kind names the stage that raised (a recognizer's kind, or 'json', 'event')."""

log = logging.getLogger("evolvable.governance.redaction")


def _log_failure(kind: str, error: BaseException) -> None:
    log.error("redaction stage %s failed: %s: %s", kind, type(error).__name__, error)


def _phone_key(value: str) -> str:
    digits = digits_of(value)
    return digits[1:] if len(digits) == 11 and digits[0] == "1" else digits


_NORMALIZERS: dict[str, Callable[[str], str]] = {
    "EMAIL": str.lower,
    "PHONE": _phone_key,
    "CREDIT_CARD": digits_of,
    "SSN": digits_of,
    "IBAN": lambda s: s.replace(" ", "").upper(),
}


@mypyc_attr(allow_interpreted_subclasses=True)  # events records the values its placeholders stand for
class PlaceholderMap:
    """Value -> placeholder for one trajectory: the same email is `<EMAIL_1>` in every step.

    Lives in memory only; the mapping is never persisted (it would be a re-identification table).
    """

    __slots__ = ("_by_value", "_counts")

    def __init__(self) -> None:
        self._by_value: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}

    def placeholder(self, kind: str, value: str) -> str:
        normalize = _NORMALIZERS.get(kind)
        key = (kind, value if normalize is None else normalize(value))
        found = self._by_value.get(key)
        if found is None:
            n = self._counts.get(kind, 0) + 1
            self._counts[kind] = n
            found = self._by_value[key] = f"<{kind}_{n}>"
        return found

    def __len__(self) -> int:
        return len(self._by_value)


class Redaction:
    """A redacted text and what was found in it; read-only.

    A plain class with read-only properties rather than a frozen dataclass: the dataclass's `__init__` sets each
    field through `object.__setattr__` and stays interpreted Python under mypyc, and `redact` makes one per text
    (2-3% of a pass)."""

    __slots__ = ("_failed", "_findings", "_text")

    def __init__(self, text: str, findings: list[Finding] | None = None, failed: bool = False) -> None:
        self._text = text
        self._findings = findings if findings is not None else []
        self._failed = failed

    @property
    def text(self) -> str:
        return self._text

    @property
    def findings(self) -> list[Finding]:
        return self._findings

    @property
    def failed(self) -> bool:
        return self._failed

    @property
    def changed(self) -> bool:
        return self._failed or bool(self._findings)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Redaction):
            return NotImplemented
        return (self._text, self._findings, self._failed) == (other._text, other._findings, other._failed)

    def __repr__(self) -> str:
        return f"Redaction(text={self._text!r}, findings={self._findings!r}, failed={self._failed!r})"


def resolve_overlaps(findings: list[Finding]) -> list[Finding]:
    """Keeps the highest-priority (then longest) finding of each overlapping group, in text order (O(n log n))."""
    if len(findings) <= 1:
        return findings
    ordered = sorted(findings)  # by start, then end: the tuples' own order
    previous_end = 0
    for start, end, _, _ in ordered:
        if start < previous_end or start >= end:
            break  # an overlap (or an empty span): rank them
        previous_end = end
    else:
        return ordered  # the common case: nothing overlaps, every finding is kept
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


@mypyc_attr(allow_interpreted_subclasses=True)  # callers may specialise an engine
class RedactionEngine:
    """Finds PII and secrets and replaces them with typed, trajectory-consistent placeholders.

    `recognizers` defaults to every recognizer, person names by gazetteer and context included (names.py);
    `person_names=True` adds the optional spaCy NER stage on top (only when spaCy and an English model are
    installed; off by default because it costs ~100x).
    """

    def __init__(
        self,
        recognizers: Sequence[Recognizer] | None = None,
        *,
        on_failure: FailureHook | None = None,
        person_names: bool = False,
        ner_model: str | None = None,
        cache: bool | None = None,
    ) -> None:
        self.recognizers: list[Recognizer] = list(default_recognizers() if recognizers is None else recognizers)
        if person_names:
            from evolvable.governance.redaction.ner import SpacyPersonRecognizer

            self.recognizers.append(SpacyPersonRecognizer(ner_model))
        self.on_failure: FailureHook = on_failure or _log_failure
        self._plan = _KeywordPlan(self.recognizers)
        # the built-in recognizers are pure functions of the text; a caller's own may not be (they may count
        # calls or fail on purpose), so their engines cache only when asked to
        self._cache: _FindingsCache | None = (
            _FindingsCache() if (recognizers is None if cache is None else cache) else None
        )
        # the dict looked up directly, without a method call per text (a miss costs ~0.4 us, ~1% of a scan)
        self._cached = self._cache.entries if self._cache is not None else None

    # ----------------------------------------------------------------- text

    def find(self, text: str) -> list[Finding]:
        """Non-overlapping findings in text order. Raises RedactionFailed (after calling the hook) if a stage raises."""
        if not text:
            return []
        cached = self._cached
        if cached is not None and (hit := cached.get(text)) is not None:
            return list(hit)
        lowered = text.lower()
        found: list[Finding] = []
        for recognizer, find in self._plan.runners(text, lowered):
            try:
                found += find(text, lowered)
            except Exception as err:
                self.report_failure(getattr(recognizer, "kind", type(recognizer).__name__), err)
                raise RedactionFailed(f"recognizer {getattr(recognizer, 'kind', recognizer)!r} failed") from err
        if len(found) > 1:
            found = resolve_overlaps(found)
        if self._cache is not None:
            self._cache.put(text, tuple(found))
        return found

    def clear_cache(self) -> None:
        """Forgets the findings kept for texts seen before (benchmarks time each pass from cold)."""
        if self._cache is not None:
            self._cache.clear()

    def redact(self, text: str, placeholders: PlaceholderMap | None = None) -> Redaction:
        try:
            findings = self.find(text)
        except RedactionFailed:
            return Redaction(FAILED_MARKER, failed=True)
        if not findings:
            return Redaction(text, findings)  # `findings` is a fresh empty list, as the default would be
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


class _FindingsCache:
    """The findings of recently seen texts, the oldest dropped first.

    Agent traffic repeats whole texts: the system prompt, tool schemas and earlier turns come again with every
    request of a conversation. Their findings depend on the text alone, so a repeat costs one dict lookup instead
    of a full scan. Bounded by entries and by characters held (the texts are kept as keys, in memory only, like
    the placeholder maps); a text longer than `max_text_chars` is not kept. Readers look `entries` up without the
    lock (one dict lookup is atomic); only `put` and `clear` change it, under the lock. First in, first out: a
    text in constant use is scanned again once per `max_entries` new texts, a negligible cost that keeps hits
    free of bookkeeping.
    """

    __slots__ = ("_chars", "_lock", "entries", "max_chars", "max_entries", "max_text_chars")

    def __init__(self, max_entries: int = 4096, max_chars: int = 8_000_000, max_text_chars: int = 262_144) -> None:
        self.entries: dict[str, tuple[Finding, ...]] = {}
        self._chars = 0
        self._lock = threading.Lock()  # an engine is shared by the proxy's threads
        self.max_entries, self.max_chars, self.max_text_chars = max_entries, max_chars, max_text_chars

    def get(self, text: str) -> tuple[Finding, ...] | None:
        return self.entries.get(text)

    def put(self, text: str, findings: tuple[Finding, ...]) -> None:
        if len(text) > self.max_text_chars:
            return
        with self._lock:
            entries = self.entries
            if text in entries:
                return
            entries[text] = findings
            self._chars += len(text)
            while len(entries) > self.max_entries or self._chars > self.max_chars:
                oldest = next(iter(entries))
                del entries[oldest]
                self._chars -= len(oldest)

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self._chars = 0

    def __len__(self) -> int:
        return len(self.entries)


_Runner = tuple[Recognizer, Callable[[str, str], Iterable[Finding]]]


_DIGIT = re.compile(r"\d")


class _KeywordPlan:
    """The gitleaks-style pre-filter: which recognizers can match a text, decided by one C multi-keyword search.

    Each distinct keyword sets the bit of each recognizer listing it: case-sensitive keywords (`exact_keywords`)
    must occur in the text, the others (`keywords`) in its lower-cased copy. A recognizer none of whose keywords
    occurs cannot match, so it does not run. A recognizer with `requires_digit` (every finding of it holds a `\\d`
    character: numbers, IBANs, house numbers) runs only on a text with one, decided by one C regex search shared
    by all of them (most prose has no digit, and each of them would test that, or scan for runs, on its own).
    Likewise a recognizer with `requires_colon` (IPv6 addresses) runs only on a text holding a `:`, one C
    substring test instead of a call (most prose has none; it is not a keyword, as JSON holds dozens).
    The recognizers to run for each combination of hits are computed once and kept.
    """

    _MAX_COMBINATIONS = 4096

    def __init__(self, recognizers: Sequence[Recognizer]) -> None:
        n = len(recognizers)
        exact: dict[str, int] = {}
        lower: dict[str, int] = {}
        self._entries: list[tuple[_Runner, int]] = []
        self._digit_bit = 1 << (2 * n)
        self._colon_bit = 1 << (2 * n + 1)
        for i, r in enumerate(recognizers):
            exact_keywords = tuple(getattr(r, "exact_keywords", ()))
            lower_keywords = tuple(getattr(r, "keywords", ()))
            for k in exact_keywords:
                exact[k] = exact.get(k, 0) | 1 << i
            for k in lower_keywords:
                lower[k] = lower.get(k, 0) | 1 << (n + i)
            # a recognizer's own keyword checks would repeat the ones done here
            find = getattr(r, "find_prefiltered", r.find)
            need = (1 << i if exact_keywords else 0) | (1 << (n + i) if lower_keywords else 0)
            if getattr(r, "requires_digit", False):
                need |= self._digit_bit
            if getattr(r, "requires_colon", False):
                need |= self._colon_bit
            self._entries.append(((r, find), need))
        self.keywords = _KeywordSearch(exact, lower)
        self._bits = self.keywords.bits
        self._digit_search = _DIGIT.search if any(need & self._digit_bit for _, need in self._entries) else None
        self._colon_test = any(need & self._colon_bit for _, need in self._entries)
        self._runners: dict[int, tuple[_Runner, ...]] = {}

    def runners(self, text: str, lowered: str) -> tuple[_Runner, ...]:
        """The recognizers to run on `text`, in their configured order (overlap ties are broken by it)."""
        hits = self._bits(text, lowered)
        if self._digit_search is not None and self._digit_search(text) is not None:
            hits |= self._digit_bit
        if self._colon_test and ":" in text:
            hits |= self._colon_bit
        found = self._runners.get(hits)
        if found is None:
            if len(self._runners) >= self._MAX_COMBINATIONS:
                self._runners.clear()
            found = self._runners[hits] = tuple(runner for runner, need in self._entries if need & hits == need)
        return found


class _KeywordSearch:
    """`bits(text, lowered)`: the bits of every case-sensitive keyword occurring in `text` and of every other
    keyword occurring in `lowered` (`text.lower()`), found by one Aho-Corasick pass over `lowered`.

    One automaton call (`ahocorasick_rs`, every occurrence of every keyword, overlapping ones included) costs
    about 0.7 us on a 200-character text, a fraction of the ~30 Python-level substring tests it replaces, even
    nested by shared prefixes. A case-sensitive ASCII keyword is searched lower-cased: it can only occur in the
    text where its lower-cased form occurs in `lowered` (`str.lower` maps each ASCII character on its own), and
    each such hit is confirmed by a substring test in the text, so the bits are exactly those of one test per
    keyword. (With a non-ASCII case-sensitive keyword every keyword gets a plain substring test instead: `Σ`
    lowers to `ς` or `σ` by context.)
    The automaton takes UTF-8, which a text holding a lone surrogate (`json.loads('"\\ud800"')`) cannot be
    encoded to: such a text gets the plain substring tests.
    """

    __slots__ = ("_exact", "_lower", "_plain", "_search", "_substring_tests_only")

    def __init__(self, exact: dict[str, int], lower: dict[str, int]) -> None:
        self._exact = tuple(exact.items())
        self._lower = tuple(lower.items())
        # a non-ASCII case-sensitive keyword (none by default) is not searched lower-cased: all tests are then plain
        self._substring_tests_only = not all(k.isascii() for k in exact)
        patterns: dict[str, tuple[int, tuple[tuple[str, int], ...]]] = {k: (bits, ()) for k, bits in lower.items()}
        for k, bits in exact.items():
            if k.isascii():
                plain, confirm = patterns.get(k.lower(), (0, ()))
                patterns[k.lower()] = (plain, (*confirm, (k, bits)))
        # per pattern: the bits it sets by occurring, and the (case-sensitive keyword, bits) pairs to confirm
        self._plain = [(bits, confirm) for bits, confirm in patterns.values()]
        self._search = AhoCorasick(list(patterns)).find_matches_as_indexes if patterns else None

    def bits(self, text: str, lowered: str) -> int:
        if self._substring_tests_only:
            return self.slow_bits(text, lowered)
        if self._search is None:
            return 0
        try:
            found = self._search(lowered, overlapping=True)
        except UnicodeEncodeError:
            return self.slow_bits(text, lowered)
        bits = 0
        if found:
            table = self._plain
            for i, _, _ in found:
                plain, confirm = table[i]
                bits |= plain
                for keyword, keyword_bits in confirm:
                    if keyword_bits & ~bits and keyword in text:
                        bits |= keyword_bits
        return bits

    def slow_bits(self, text: str, lowered: str) -> int:
        """`bits` by one substring test per keyword (any text)."""
        bits = 0
        for keyword, keyword_bits in self._exact:
            if keyword in text:
                bits |= keyword_bits
        for keyword, keyword_bits in self._lower:
            if keyword in lowered:
                bits |= keyword_bits
        return bits


class _RedactionCounts:
    """Findings per kind for the `evolvable_redactions_total` metric, added up in a dict and handed to the
    Prometheus counters at most every `interval_s` and at the end of each event batch (`flush`): one labelled
    `inc` per finding (a lookup and a lock) cost ~6% of a redaction."""

    __slots__ = ("_due", "_pending", "interval_s")

    def __init__(self, interval_s: float = 0.5) -> None:
        self._pending: dict[str, int] = {}
        self.interval_s = interval_s
        self._due = time.monotonic() + interval_s

    def add(self, findings: Sequence[Finding]) -> None:
        pending = self._pending
        for finding in findings:
            kind = finding[2]
            pending[kind] = pending.get(kind, 0) + 1
        if (now := time.monotonic()) >= self._due:
            self._due = now + self.interval_s
            self.flush()

    def flush(self) -> None:
        pending, self._pending = self._pending, {}
        for kind, n in pending.items():
            REDACTIONS.labels(kind).inc(n)


redaction_counts = _RedactionCounts()


def apply_findings(text: str, findings: Sequence[Finding], placeholders: PlaceholderMap) -> str:
    """`text` with each finding (non-overlapping, in text order) replaced by its placeholder."""
    placeholder = placeholders.placeholder
    redaction_counts.add(findings)
    if len(findings) == 1:  # the commonest case: two concatenations, no list
        start, end, kind, _ = findings[0]
        return text[:start] + placeholder(kind, text[start:end]) + text[end:]
    parts: list[str] = []
    pos = 0
    for start, end, kind, _ in findings:
        parts.append(text[pos:start])
        parts.append(placeholder(kind, text[start:end]))
        pos = end
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
