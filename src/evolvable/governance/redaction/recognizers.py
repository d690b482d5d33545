"""Recognizers: small objects that find one kind of sensitive value in a text.

Each recognizer follows the gitleaks recipe: a cheap keyword pre-filter (a substring
test in C) decides whether its regex runs at all, and a validator (checksum, entropy,
context) decides whether a regex candidate is a finding. Patterns put their boundary
checks after the first character (`\\d(?<!...)`) or use literal prefixes so the regex
engine can skip ahead fast; boundaries also accept JSON escapes (`\\n4111...`).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ahocorasick_rs import AhoCorasick

from evolvable.governance.redaction import validators as v
from evolvable.governance.redaction.findings import Finding, free_left


class Recognizer(Protocol):
    """Finds one kind of value. `lowered` is `text.lower()`, for keyword pre-filters only (its indices may differ).

    Not `runtime_checkable` (nothing tests it with `isinstance`): mypyc, which compiles this module for the
    native build (scripts/build_native_redaction.sh), rejects a runtime-checkable protocol."""

    kind: str

    def find(self, text: str, lowered: str) -> Iterable[Finding]: ...


Validator = Callable[[str, re.Match[str]], "tuple[int, int] | None"]
"""Given the whole text and a match, returns the span to redact, or None to drop the candidate."""


@dataclass(slots=True)
class RegexRecognizer:
    kind: str
    pattern: re.Pattern[str]
    keywords: tuple[str, ...] = ()
    """Lower-case substrings; the regex runs only if one occurs in the lowered text."""
    exact_keywords: tuple[str, ...] = ()
    """Case-sensitive substrings of the original text (e.g. `AKIA`)."""
    requires: tuple[str, ...] = ()
    """Case-sensitive substrings of the original text that must all occur (checked after the keywords)."""
    validate: Validator | None = None
    group: int | str = 0
    priority: int = 50
    on_lowered: bool = False
    """Match a case-sensitive lower-case pattern against the lowered text (much faster than IGNORECASE);
    falls back to IGNORECASE on the original when lowering changed the length (a few Unicode letters)."""
    gate: Callable[[str], bool] | None = None
    """A cheap necessary condition on the text, for patterns without keywords: False means no match."""
    starts: Callable[[str], list[int] | None] | None = None
    """Where matches can begin, in order, found faster than the regex engine would scan for them (None: scan as
    usual). Each is matched in place, skipping those inside an earlier match: the `finditer` result, provided every
    position where a match can begin is listed."""
    requires_digit: bool = False
    """Every match holds a `\\d` character: the engine skips the recognizer on a text without one."""
    _ignorecase: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._ignorecase = (
            re.compile(self.pattern.pattern, self.pattern.flags | re.IGNORECASE) if self.on_lowered else None
        )

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        if self.keywords and not any(k in lowered for k in self.keywords):
            return ()
        if self.exact_keywords and not any(k in text for k in self.exact_keywords):
            return ()
        return self.find_prefiltered(text, lowered)

    def find_prefiltered(self, text: str, lowered: str) -> list[Finding]:
        """`find` for a caller that already checked the keywords (the engine's pre-filter)."""
        if self.requires:
            for k in self.requires:
                if k not in text:
                    return []
        if self.gate is not None and not self.gate(text):
            return []
        if self.on_lowered:
            out: list[Finding] = []
            self.scan(text, lowered, 0, len(text), out)
            return out
        validate, kind, priority = self.validate, self.kind, self.priority
        starts = None if self.starts is None else self.starts(text)
        matches: Iterable[re.Match[str]] = (
            self.pattern.finditer(text) if starts is None else _matches_at(self.pattern, text, starts)
        )
        if validate is None:
            group = self.group
            return [Finding(*m.span(group), kind, priority) for m in matches]
        found: list[Finding] = []
        for m in matches:
            span = validate(text, m)
            if span is not None and span[1] > span[0]:
                found.append(Finding(span[0], span[1], kind, priority))
        return found

    def scan(self, text: str, lowered: str, pos: int, endpos: int, out: list[Finding]) -> None:
        pattern, subject = self.pattern, text
        if self.on_lowered:
            if len(lowered) == len(text):
                subject = lowered
            else:
                pattern = self._ignorecase  # type: ignore[assignment]
        validate, kind, priority = self.validate, self.kind, self.priority
        for m in pattern.finditer(subject, pos, endpos):
            span: tuple[int, int] | None = m.span(self.group) if validate is None else validate(text, m)
            if span is not None and span[1] > span[0]:
                out.append(Finding(span[0], span[1], kind, priority))


def _matches_at(pattern: re.Pattern[str], text: str, starts: list[int]) -> list[re.Match[str]]:
    """`pattern.finditer(text)` when every position where a match can begin is in `starts` (ascending)."""
    found: list[re.Match[str]] = []
    resume = 0
    for start in starts:
        if start >= resume and (m := pattern.match(text, start)) is not None:
            found.append(m)
            resume = m.end() if m.end() > start else start + 1
    return found


_PHONE_WORDS = ("phone", "tel", "mobile", "cell", "call", "sms", "whatsapp", "fax")
_PHONE_WORD = re.compile(
    r"(?:^|[^a-z0-9_])(?:phone|tel|mobile|cell|call|sms|whatsapp|fax)(?:_?(?:number|no|num)\b|[^a-z0-9_\n])[^\n]*$"
)


class RunChecker(Protocol):
    """Checks one run of digits and separators (with `digits` digits) and appends its findings to `out`."""

    def check(self, text: str, start: int, end: int, digits: int, out: list[Finding]) -> None: ...


class NumberRecognizer:
    """Phones, cards, SSNs and IPv4 addresses live inside runs of digits and separators. One cheap scan finds
    those runs; each run is then matched only by the patterns its shape allows (a card needs 13+ digits, an
    IPv4 address three dots), which is several times faster than one full-text pass per pattern."""

    kind = "NUMBERS"
    requires_digit = True  # every run ends with a digit: the engine skips texts without one

    def __init__(
        self,
        intl_phone: RegexRecognizer,
        us_phone: RegexRecognizer,
        card: RegexRecognizer,
        ssn: RegexRecognizer,
        ipv4: RegexRecognizer,
        national: RunChecker | None = None,
    ) -> None:
        self.intl_phone, self.us_phone, self.card, self.ssn, self.ipv4 = intl_phone, us_phone, card, ssn, ipv4
        self.national = national
        self._check_local: Callable[[str, int, int, list[Finding]], None] | None = getattr(
            national, "check_local", None
        )
        # shortcuts for the commonest run shapes, which hold for the default card and IPv4 recognizers only
        self._card_shortcut = card.pattern is _CARD and card.validate is _card
        self._ipv4_shortcut = ipv4.pattern is _IPV4 and ipv4.validate is _public_ipv4
        self._shape_shortcuts = us_phone.pattern is _US_PHONE and ssn.pattern is _SSN
        self._skip_dates = self._shape_shortcuts and (national is None or getattr(national, "ignores_dates", False))

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        out: list[Finding] = []
        n = len(text)
        data = byte_per_character(text)
        ascii_runs = data is not None  # then every run is ASCII, and `\d` in the patterns means `[0-9]`
        shape_shortcuts = self._shape_shortcuts
        for run_start, run_end in runs_in(text, data):
            run = text[run_start:run_end]
            size = run_end - run_start
            plus = "+" in run
            dots = run.count(".")
            if size < (8 if self.national is not None else 10) and not plus and dots < 3:
                continue  # no international phone, no IPv4 address; a US phone, card or SSN needs 9+ digits
            if self._skip_dates and _DATE_RUN.fullmatch(run) is not None:
                continue  # a date, maybe with an hour (a quarter of the runs in logs): see `_DATE_RUN`
            # in ASCII text, digits as 0 and separators as `-` (one C translate) count the digits, and rule the
            # default US and SSN patterns out
            shape = None
            if run.isdigit():
                digits = size
            elif ascii_runs:
                shape = run.encode("ascii").translate(_DIGITS_SEPARATORS)
                digits = shape.count(48)  # b"0": only digits become one
                if not shape_shortcuts:
                    shape = None
            else:
                digits = len(v.digits_of(run))
            if digits < 8 and not plus and dots < 3:
                if digits >= 6 and self._check_local is not None:
                    self._check_local(text, run_start, run_end, out)
                continue
            national = self.national is not None and not plus and digits <= 15
            if digits < 9 and not plus and dots < 3:
                if national:
                    self.national.check(text, run_start, run_end, digits, out)  # type: ignore[union-attr]
                continue
            found_before = len(out)
            end = run_end + 2 if run_end + 2 < n else n  # +2: let look-aheads see what follows
            if plus:
                self.intl_phone.scan(text, lowered, run_start, end, out)
            if digits >= 10:
                # a US number is `ddd-ddd-dddd` or `(ddd)` then `ddd-dddd`, with any of ` .-` for each `-`
                # (`bytes.find`, not `in`: `in` first tries the operand as an integer and formats a TypeError)
                if digits != size and (shape is None or shape.find(b"000-000-0000") >= 0 or shape.find(b"000)") >= 0):
                    self.us_phone.scan(text, lowered, run_start, end, out)
                if digits <= 16 and (digits == size or run[1:].isdigit()):
                    self._bare_phone(text, lowered, run_start, run_end, out)
                if digits >= 13:
                    if digits == size <= 19 and ascii_runs and self._card_shortcut and _free_right(text, run_end, end):
                        # 13-19 bare digits, nothing glued after them: `_CARD` matches exactly the run
                        if free_left(text, run_start) and v.card_digits_ok(run):
                            out.append(Finding(run_start, run_end, self.card.kind, self.card.priority))
                    else:
                        self.card.scan(text, lowered, run_start, end, out)
            if digits >= 9 and (shape is None or shape.find(b"000-00-0000") >= 0) and run.count("-") >= 2:
                self.ssn.scan(text, lowered, run_start, end, out)
            claimed = len(out) > found_before and out[-1].start <= run_start and out[-1].end >= run_end
            if national and not claimed:  # national formats, unless the whole run is already found
                self.national.check(text, run_start, run_end, digits, out)  # type: ignore[union-attr]
            if dots >= 3:
                if dots == 3 and ascii_runs and self._ipv4_shortcut:
                    # four groups of 1-3 digits, and a run cannot end where an address would go on: `_IPV4`
                    # matches exactly the run; it is an address if the groups are octets (a subset of those runs)
                    octets = v.IPV4_OCTETS.fullmatch(run)
                    if octets is not None:
                        if v.public_ipv4_value(v.ipv4_octets_value(octets)) and _not_a_version(text, run_start):
                            out.append(Finding(run_start, run_end, self.ipv4.kind, self.ipv4.priority))
                        continue
                    if _DOTTED_QUAD.fullmatch(run):
                        continue
                self.ipv4.scan(text, lowered, run_start, end, out)
        return out

    def _bare_phone(self, text: str, lowered: str, start: int, end: int, out: list[Finding]) -> None:
        """A phone number written without separators counts only after a phone word (`call 4155550123`)."""
        before = text[max(0, start - 24) : start].lower()
        for word in _PHONE_WORDS:  # a cheap test before the regex
            if word in before:
                break
        else:
            return
        if not _PHONE_WORD.search(before):
            return
        if not free_left(text, start):
            return
        if end < len(text) and (text[end].isalnum() or text[end] == "_"):
            return
        digits = text[start:end].lstrip("+")
        plus = text[start] == "+"
        ok = v.nanp_ok(digits) if len(digits) <= 11 and not plus else 10 <= len(digits) <= 15
        if ok:
            out.append(Finding(start, end, "PHONE", 45))


def _check(predicate: Callable[[str], bool], group: int | str = 0) -> Validator:
    def validate(text: str, m: re.Match[str]) -> tuple[int, int] | None:
        return m.span(group) if predicate(m.group(group)) else None

    return validate


# Boundaries. Numbers must not be glued to letters, digits or the separators of ids, versions and SKUs
# (`SKU-448-221-9034`, `v1.2.3.4`), except that they may follow a JSON escape (`\\n4111...`). The check runs in
# Python on the (rare) regex hits rather than as a leading look-behind, which would stop the regex engine
# from skipping quickly to candidate first characters.
_NUM_AFTER = r"(?![A-Za-z0-9_]|[.\-/]\d)"


_WORD_ASCII = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _free_right(text: str, end: int, endpos: int) -> bool:
    """`_NUM_AFTER` at `end` of text whose digits are ASCII (`byte_per_character`), seeing no further than `endpos`."""
    if end >= endpos:
        return True
    after = text[end]
    if after in _WORD_ASCII:
        return False
    return not (after in ".-/" and end + 1 < endpos and text[end + 1] in "0123456789")


# --------------------------------------------------------------------------- PII

_EMAIL_LOCAL_REVERSED = re.compile(r"[A-Za-z0-9._%+\-]{0,64}")  # the local part, matched backwards from the @
_EMAIL_DOMAIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*\.[A-Za-z]{2,24}")


class EmailRecognizer:
    """Scans from each `@` (rare in text) instead of trying a local-part regex at every position."""

    kind = "EMAIL"
    priority = 70
    exact_keywords = ("@",)  # lets the engine's pre-filter skip texts without one

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        out: list[Finding] = []
        at = text.find("@")
        while at != -1:
            local = _EMAIL_LOCAL_REVERSED.match(text[max(0, at - 64) : at][::-1])
            start = at - local.end()  # type: ignore[union-attr]
            # `\nbob@x.com` inside a JSON-escaped string: the `n` belongs to the escape.
            if start >= 1 and start < at and text[start - 1] == "\\" and text[start] in "nrtbf":
                start += 1
            while start < at and text[start] in ".-":
                start += 1
            m = _EMAIL_DOMAIN.match(text, at + 1)
            if start < at and m is not None:
                end = m.end()
                while text[end - 1] == "-":
                    end -= 1
                if end >= len(text) or not (text[end].isalnum() or text[end] in "-_"):
                    out.append(Finding(start, end, self.kind, self.priority))
            at = text.find("@", at + 1)
        return out


def _phone_intl(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    return m.span() if 8 <= len(v.digits_of(m.group())) <= 15 else None


def _phone_us(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    if not free_left(text, m.start()):
        return None
    return m.span() if v.nanp_ok(v.digits_of(m.group())) else None


def _card(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    if not free_left(text, m.start()):
        return None
    return m.span() if v.card_ok(m.group()) else None


def _ssn(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    if not free_left(text, m.start()):
        return None
    return m.span() if v.ssn_ok(m.group()) else None


_IBAN = re.compile(r"[A-Z][A-Z]\d\d(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,3})?(?![A-Za-z0-9])")


# `?` stands for any non-ASCII character too (encoding with "replace" keeps one byte per character), which may be
# a digit to `\d`: counting it as one keeps the test a necessary condition
_UPPER_DIGIT_SHAPE = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789?", b"A" * 26 + b"0" * 11)
_IBAN_SHAPE = re.compile(rb"AA00(?: ?[A0]{4}){2}")  # how `_IBAN` must start, once capitals are A and digits 0


def _iban_starts(text: str) -> list[int]:
    """Where `_IBAN` can match: capitals become `A` and digits `0` (a byte translate), and a regex with a literal
    prefix, which the regex engine finds by a fast search, finds each position where an IBAN could start (overlapping
    ones too). Most texts have none, and `_IBAN` is then tried at those alone instead of at every capital letter."""
    shape = text.encode("ascii", "replace").translate(_UPPER_DIGIT_SHAPE)
    starts: list[int] = []
    search = _IBAN_SHAPE.search
    m = search(shape)
    while m is not None:
        starts.append(m.start())
        m = search(shape, m.start() + 1)
    return starts


def _iban(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    """Tries the longest group-aligned prefix first, so a trailing word (`... EURO`) does not spoil a valid IBAN."""
    if m.start() and (text[m.start() - 1].isalnum()):
        return None
    raw = m.group()
    ends = [len(raw)] + [i for i in range(len(raw) - 1, 14, -1) if raw[i] == " "]
    for end in ends:
        if v.iban_ok(raw[:end]):
            return m.start(), m.start() + end
    return None


_IPV6_GLUE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:")
_VERSION_WORDS = ("version", "ver ", "release", "build", "v")


def _public_ipv4(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    return m.span() if _public_ipv4_at(text, m.start(), m.group()) else None


def _public_ipv4_at(text: str, start: int, address: str) -> bool:
    return _not_a_version(text, start) and v.public_ip(address)


def _not_a_version(text: str, start: int) -> bool:
    """Nothing glued on the left, and no `version`/`build`/`v` just before (`v1.2.3.4` is no address)."""
    return free_left(text, start) and not text[max(0, start - 9) : start].lower().rstrip().endswith(_VERSION_WORDS)


_DOTTED_QUAD = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")


_V6_SIX_COLONS = re.compile(r":(?:[0-9A-Fa-f.]*:){5}")
_V6_SEED = re.compile(r":[0-9A-Fa-f]{0,4}:")
_V6_RIGHT = re.compile(r"[0-9A-Fa-f:.]*")
_HEX_COLON_REVERSED = re.compile(r"[0-9A-Fa-f:]{0,40}")  # hex digits and colons left of a seed, read backwards


class IPv6Recognizer:
    """Seeds on `:hex:` (colons are common in JSON, but `: "` fails at once), then widens to the full address."""

    kind = "IP_ADDRESS"
    priority = 50
    requires_colon = True  # every candidate holds a `:`: the engine skips texts without one

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        if "::" not in text and (text.count(":") < 6 or _V6_SIX_COLONS.search(text) is None):
            return []  # every candidate needs `::` or six colons with only hex digits and dots between them
        out: list[Finding] = []
        pos = 0
        seed = _V6_SEED.search
        while (m := seed(text, pos)) is not None:
            seed_at = m.start()
            left = _HEX_COLON_REVERSED.match(text[max(0, seed_at - 40) : seed_at][::-1])
            start = seed_at - left.end()  # type: ignore[union-attr]
            end = _V6_RIGHT.match(text, seed_at).end()  # type: ignore[union-attr]
            pos = max(end, seed_at + 1)
            while end > start and (text[end - 1] == "." or (text[end - 1] == ":" and text[end - 2 : end] != "::")):
                end -= 1
            candidate = text[start:end]
            colons = candidate.count(":")
            if not ("::" in candidate or colons >= 7 or (colons == 6 and "." in candidate)):
                continue  # `10:15:30`, MAC addresses: not IPv6 shapes, skip the (slow) parse
            if not free_left(text, start, _IPV6_GLUE):
                continue
            head, _, tail = candidate.rpartition(":")
            port_like = tail.isdigit() and len(tail) <= 5 and head.count(":") >= 2 and v.parses_as_ip(head)
            if port_like and (not v.parses_as_ip(candidate) or not v.public_ip(head)):
                candidate, end = head, start + len(head)  # `addr:port` written without brackets
            if end < len(text) and (text[end].isalnum() or text[end] == "_"):
                continue
            if v.public_ip(candidate):
                out.append(Finding(start, end, self.kind, self.priority))
        return out


_SSN_CONTEXT = re.compile(
    r"(?:ssn|social security(?: number| no\.?)?|ss#)[^0-9\n]{0,20}?(\d{3}[ -]?\d{2}[ -]?\d{4})(?!\d)"
)


_NUMBER_RUN = re.compile(r"(?:\+|\(|\d)[\d .()+\-/]{5,}\d")
_RUN_CHARS = bytes(ord("1") if chr(b) in "0123456789 .()+-/" else ord("0") for b in range(256))


def byte_per_character(text: str) -> bytes | None:
    """`text` as one byte per character (latin-1, `?` for a wider character) if every decimal digit in it is an
    ASCII one, so that `\\d` means `[0-9]` in it; else None. ASCII text always qualifies; other text whose
    characters all have a latin-1 byte too (no `?` was added: no digit outside ASCII lies below U+0100); wider text
    after one scan for such a digit (`٣`, a full-width `１`). Accents, curly quotes and dashes keep the byte form."""
    if text.isascii():
        return text.encode("ascii")
    data = text.encode("latin-1", "replace")
    if data.count(b"?") == text.count("?") or _OTHER_DIGIT.search(text) is None:
        return data
    return None


_OTHER_DIGIT = re.compile(r"[^\D0-9]")  # a decimal digit other than 0-9


def number_runs(text: str) -> list[tuple[int, int]]:
    """The spans `_NUMBER_RUN.finditer(text)` yields (`runs_in` the text's byte form)."""
    return runs_in(text, byte_per_character(text))


def runs_in(text: str, data: bytes | None) -> list[tuple[int, int]]:
    """`number_runs(text)`, found faster from `data`, the text's byte form (`byte_per_character`), if it has one.

    The regex engine would test each character against a class; instead the text's bytes are translated to `1`
    (a run character) or `0`, and substring searches find each stretch of seven or more `1`. Within a stretch the
    regex match runs from the first `+`, `(` or digit to the last digit, if that spans seven characters or more.
    """
    if data is None:
        return [m.span() for m in _NUMBER_RUN.finditer(text)]
    spans: list[tuple[int, int]] = []
    shape = data.translate(_RUN_CHARS)
    i = shape.find(b"1111111")
    while i != -1:
        j = shape.find(b"0", i + 7)
        if j == -1:
            j = len(shape)
        chars = text[i:j]
        start = i + len(chars) - len(chars.lstrip(" .)-/"))
        end = i + len(chars.rstrip(" .()+-/"))
        if end - start >= 7:
            spans.append((start, end))
        i = shape.find(b"1111111", j)
    return spans


# `2019-01-19`, `19/01/2019 05`: 8 or 10 digits in groups of 4-2-2(-2) or 2-2-4(-2), no `+`, under three dots.
# No default pattern matches inside such a run (a US phone needs `ddd-ddd-dddd`, an SSN `ddd-dd-dddd`, a card 13+
# digits, an IPv4 address three dots) and the national checker drops it as date-like (`ignores_dates`), so the
# number recognizer skips it after one C match instead of trying each pattern in Python.
_DATE_RUN = re.compile(r"(?:(?:19|20)\d\d(?P<a>[-/.])\d\d(?P=a)\d\d|\d\d(?P<b>[-/.])\d\d(?P=b)(?:19|20)\d\d)(?: \d\d)?")
_US_PHONE = re.compile(r"(?:1[ .\-]?)?(?:\(\d{3}\)[ .\-]?|\d{3}[ .\-])\d{3}[ .\-]\d{4}" + _NUM_AFTER)
_SSN = re.compile(r"\d{3}-\d\d-\d{4}" + _NUM_AFTER)
# digits become 0 and US-number separators `-`; other bytes keep their value, none of them 0 or `-`. `_US_PHONE`
# needs `000-000-0000` or `000)` in a run so translated, `_SSN` needs `000-00-0000`.
_DIGITS_SEPARATORS = bytes.maketrans(b"0123456789 .-", b"0" * 10 + b"---")
_CARD = re.compile(r"\d{4}(?:(?:[ \-]?\d{4}){2}[ \-]?\d{1,7}|[ \-]?\d{6}[ \-]?\d{4,5})" + _NUM_AFTER)
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}(?![0-9]|\.\d)")


def pii_recognizers() -> list[Recognizer]:
    numbers = [
        RegexRecognizer(
            "PHONE",
            re.compile(r"\+(?<![A-Za-z0-9_+]\+)\d{1,3}(?:[ .\-]?(?:\(\d{1,4}\)|\d{1,5})){2,6}" + _NUM_AFTER),
            validate=_phone_intl,
        ),
        RegexRecognizer(
            "PHONE",
            _US_PHONE,
            validate=_phone_us,
        ),
        RegexRecognizer(
            "CREDIT_CARD",
            _CARD,
            validate=_card,
            priority=60,
        ),
        RegexRecognizer(
            "SSN",
            _SSN,
            validate=_ssn,
            priority=60,
        ),
        RegexRecognizer(
            "IP_ADDRESS",
            _IPV4,
            validate=_public_ipv4,
        ),
    ]
    from evolvable.governance.redaction.phones import NationalPhoneChecker

    return [
        EmailRecognizer(),
        NumberRecognizer(numbers[0], numbers[1], numbers[2], numbers[3], numbers[4], national=NationalPhoneChecker()),
        RegexRecognizer("IBAN", _IBAN, validate=_iban, priority=60, starts=_iban_starts, requires_digit=True),
        RegexRecognizer(
            "SSN",
            _SSN_CONTEXT,
            keywords=("ssn", "social security", "ss#"),
            validate=_check(v.ssn_ok, 1),
            priority=60,
            on_lowered=True,
        ),
        IPv6Recognizer(),
    ]


# --------------------------------------------------------------------------- secrets


def _min_entropy(bits: float, classes: int = 2, group: int | str = 0) -> Validator:
    def validate(text: str, m: re.Match[str]) -> tuple[int, int] | None:
        s = m.group(group)
        return m.span(group) if v.char_classes(s) >= classes and v.entropy_at_least(s, bits) else None

    return validate


_HEX = frozenset("0123456789abcdefABCDEF")


_AWS_SECRET = re.compile(r"[A-Za-z0-9/+](?<![A-Za-z0-9/+][A-Za-z0-9/+])[A-Za-z0-9/+]{39}(?![A-Za-z0-9/+=])")
_AWS_SECRET_SHAPE = bytes(
    ord("1") if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "/+") else b if b == ord("=") else ord("0")
    for b in range(256)
)
# forty key characters (a literal prefix the regex engine finds by a fast search), not preceded by another one,
# and followed by neither another one nor `=`: exactly where `_AWS_SECRET` matches, once key characters are `1`
_AWS_SECRET_SHAPED = re.compile(b"1" * 40 + rb"(?<!" + b"1" * 41 + rb")(?![1=])")


def _aws_secret_starts(text: str) -> list[int]:
    shape = text.encode("ascii", "replace").translate(_AWS_SECRET_SHAPE)  # one byte per character, `?` for others
    return [m.start() for m in _AWS_SECRET_SHAPED.finditer(shape)]


def _aws_secret(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    s = m.group()
    window = text[max(0, m.start() - 100) : m.start()].lower()
    if not any(k in window for k in ("aws", "secret", "credential")):
        return None
    if set(s) <= _HEX or v.char_classes(s) < 3 or not v.entropy_at_least(s, 4.0):
        return None
    return m.span()


_PEM = re.compile(
    r"-----BEGIN[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-----"
    r"(?:.{0,12000}?-----END[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-----"
    r"|(?:(?:\\[nr]|\s)+(?:(?:Proc-Type|DEK-Info|Comment|Version):[^\n\\]*|[A-Za-z0-9+/=]{8,}))*)",
    re.DOTALL,
)


_SCHEME_REVERSED = re.compile(r"[A-Za-z0-9+.\-]{0,32}")  # a URL scheme, read backwards from its `://`


def _url_credential_starts(text: str) -> list[int]:
    """Where a `scheme://user:password@` match can begin: at the start of the scheme before each `://` (a letter,
    then 1-30 scheme characters, none before it), found by substring search instead of trying every letter."""
    starts: list[int] = []
    colon = text.find("://")
    while colon != -1:
        length = _SCHEME_REVERSED.match(text[max(0, colon - 32) : colon][::-1]).end()  # type: ignore[union-attr]
        if 2 <= length <= 31 and text[colon - length] in _ASCII_LETTERS:
            starts.append(colon - length)
        colon = text.find("://", colon + 3)
    return starts


def _stripe_starts(text: str) -> list[int]:
    """Where a Stripe key can begin: one character before each `k_live_`, `k_test_`, `k_prod_`, and at `whsec_`."""
    starts: list[int] = []
    for marker, offset in (("k_live_", 1), ("k_test_", 1), ("k_prod_", 1), ("whsec_", 0)):
        i = text.find(marker, offset)
        while i != -1:
            starts.append(i - offset)
            i = text.find(marker, i + 1)
    starts.sort()
    return starts


_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


_TOKEN_END = r"(?![A-Za-z0-9_\-])"

# Vendor tokens found by a literal prefix: (kind, pattern, the prefixes as case-sensitive keywords). Each pattern
# checks its own leading boundary with a look-behind placed after its first character, so the regex engine can
# skip ahead to that character, and ends at a token boundary.
_PREFIXED_TOKENS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "GITHUB_TOKEN",
        r"g(?<![A-Za-z0-9]g)(?:h[pousr]_[A-Za-z0-9]{36,255}|ithub_pat_[A-Za-z0-9_]{22,255})" + _TOKEN_END,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    (
        "SLACK_TOKEN",
        r"x(?<![A-Za-z0-9]x)(?:ox[abposre]-[A-Za-z0-9\-]{10,250}|app-\d-[A-Za-z0-9\-]{10,250})"
        + _TOKEN_END
        + r"|https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]{10,200}",
        ("xox", "xapp-", "hooks.slack.com"),
    ),
    (
        "GOOGLE_API_KEY",
        r"(?:A(?<![A-Za-z0-9]A)Iza[0-9A-Za-z_\-]{35}|y(?<![A-Za-z0-9]y)a29\.[0-9A-Za-z_\-]{20,500})" + _TOKEN_END,
        ("AIza", "ya29."),
    ),
    (
        "GITLAB_TOKEN",
        r"g(?<![A-Za-z0-9]g)l(?:pat|dt|ptt|rt|cbt|oas)-[A-Za-z0-9_\-]{20,64}" + _TOKEN_END,
        ("glpat-", "gldt-", "glptt-", "glrt-", "glcbt-", "gloas-"),
    ),
    ("NPM_TOKEN", r"n(?<![A-Za-z0-9]n)pm_[A-Za-z0-9]{36}" + _TOKEN_END, ("npm_",)),
    ("SENDGRID_KEY", r"S(?<![A-Za-z0-9]S)G\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}" + _TOKEN_END, ("SG.",)),
)


def secret_recognizers() -> list[Recognizer]:
    tok = _TOKEN_END
    prefixed: list[Recognizer] = [
        RegexRecognizer(kind, re.compile(pattern), exact_keywords=keywords, priority=90)
        for kind, pattern, keywords in _PREFIXED_TOKENS
    ]
    return [
        RegexRecognizer("PRIVATE_KEY", _PEM, exact_keywords=("PRIVATE KEY",), priority=100),
        RegexRecognizer(
            "AWS_ACCESS_KEY",
            re.compile(r"A(?<![A-Za-z0-9]A)(?:3T[A-Z0-9]|KIA|SIA|BIA|CCA)[A-Z2-7]{16}(?![A-Za-z0-9])"),
            exact_keywords=("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
            priority=90,
        ),
        RegexRecognizer(
            "AWS_SECRET_KEY",
            _AWS_SECRET,
            keywords=("aws", "secret", "credential"),
            validate=_aws_secret,
            starts=_aws_secret_starts,
            priority=85,
        ),
        *prefixed,
        RegexRecognizer(
            "ANTHROPIC_KEY",
            re.compile(r"sk-ant-(?<![A-Za-z0-9]sk-ant-)[A-Za-z0-9_\-]{20,300}" + tok),
            exact_keywords=("sk-ant-",),
            priority=91,
        ),
        RegexRecognizer(
            "OPENAI_KEY",
            re.compile(r"sk-(?<![A-Za-z0-9_\-]sk-)(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,300}" + tok),
            exact_keywords=("sk-",),
            validate=_min_entropy(3.5),
            priority=90,
        ),
        RegexRecognizer(
            "STRIPE_KEY",
            re.compile(
                r"(?:[sr](?<![A-Za-z0-9][sr])k_(?:live|test|prod)_[A-Za-z0-9]{10,99}"
                r"|w(?<![A-Za-z0-9]w)hsec_[A-Za-z0-9]{20,99})" + tok
            ),
            exact_keywords=("_live_", "_test_", "_prod_", "whsec_"),
            priority=90,
            starts=_stripe_starts,
        ),
        RegexRecognizer(
            "JWT",
            re.compile(r"eyJ(?<![A-Za-z0-9_\-]eyJ)[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*" + tok),
            exact_keywords=("eyJ",),
            priority=92,
        ),
        RegexRecognizer(
            "PASSWORD",
            re.compile(
                r"[A-Za-z](?<![A-Za-z0-9+.\-][A-Za-z])[A-Za-z0-9+.\-]{1,30}://[^\s:/@\"'<>\\]{0,128}:"
                r"(?P<secret>[^\s/\"'<>\\]{1,256})@(?=[A-Za-z0-9\[:])"
            ),
            exact_keywords=("://",),
            requires=("@",),
            starts=_url_credential_starts,
            group="secret",
            priority=85,
        ),
        RegexRecognizer(
            "SECRET",
            # `\b(?i:bearer|basic)` with the boundary checked after a first letter the regex engine can skip to
            re.compile(r"[bB](?<!\w[bB])(?i:earer|asic)(?i:\s+(?P<value>[A-Za-z0-9._~+/\-]{16,500}=*))"),
            keywords=("bearer", "basic"),
            validate=_min_entropy(3.0, 2, "value"),
            group="value",
            priority=80,
        ),
        AssignmentSecretRecognizer(),
    ]


# --------------------------------------------------------------------------- generic assignments

# A key hint directly followed by the rest of the key and a separator (`:`/`=`, or a space after a CLI flag);
# matched on the lowered text, with a possessive run so misses fail without backtracking.
# Keys ending in a common non-secret word (`max_tokens`, `key_id`, `token_url`) are dropped by look-behinds in C
# before any Python runs; `key_kind` makes the full decision for the rest.
_COMMON_NON_SECRET_ENDINGS = "".join(
    f"(?<!{re.escape(ending)})"
    for ending in (
        "tokens", "_id", "_ids", "_url", "_uri", "_ttl", "_count", "_type", "_name", "_path", "_file", "_limit",
        "_size", "_length", "_version", "_prefix", "_at", "_expires", "keys", "_usage", "_header",
    )
)  # fmt: skip
_KEY_HINT = re.compile(
    r"""(?:pass|pwd|secret|token|credential|key|auth|pw|_pat)(?P<rest>[a-z0-9_.\-]{0,64}+)"""
    + _COMMON_NON_SECRET_ENDINGS
    + r"""(?:\\{0,3}["'])?(?:[ \t]*[:=]| (?=\S))"""
)
_KEY_LEFT_REVERSED = re.compile(r"[A-Za-z0-9_.\-]{0,64}")
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_ASSIGN_TAIL = re.compile(
    r"""(?:\\{0,3}["'])?[ \t]*(?::=|=>|=|:)[ \t]*"""
    r"""(?:(?P<q>\\{0,3}["'])(?P<qv>(?:(?!(?P=q))[^\n]){1,512}?)(?P=q)"""
    r"""|(?P<v>(?:[^\s"'\\,;<>(){}\[\]`&|]++|&(?![A-Za-z_][A-Za-z0-9_]*=)){1,512}))"""
)
_CLI_FLAG_TAIL = re.compile(r"""[ ](?P<v>[^\s"'\\,;<>(){}\[\]`&|-][^\s"'\\,;<>(){}\[\]`&|]{0,511})""")
# `p(?<!\wp)` is `\bp` with the boundary checked after the literal, so the regex engine can skip to each `p`
_PROSE = re.compile(r"p(?<!\wp)(?:assword|asscode|assphrase|wd)\s+(?:is|was)\s+(?P<v>[^\s\"'<>]{4,256})")
_KEY_WORDS = re.compile(r"[_.\-]+|(?<=[a-z0-9])(?=[A-Z])")

_PASSWORD_WORDS = frozenset({"password", "passwd", "passphrase", "passcode", "pwd", "pass", "pw", "secret"})
_TOKEN_WORDS = frozenset({"token", "credential", "credentials", "auth", "apikey", "authtoken", "accesstoken", "pat"})
_WORDS_ENDING_IN_KEY = frozenset({"monkey", "turkey", "donkey", "jockey", "hockey", "whiskey", "hotkey", "turnkey"})
# `<word>_key` is a secret unless the word makes it an identifier or a lookup key (`cache_key`, `primary_key`)
_NON_SECRET_KEY_QUALIFIERS = frozenset(
    {
        "cache", "primary", "foreign", "sort", "partition", "idempotency", "public", "row", "dedup", "dedupe", "lookup",
        "map", "hash", "object", "redis", "i18n", "translation", "unique", "composite", "natural", "surrogate",
        "shard", "routing", "group", "index", "search", "sequence", "ssh", "gpg", "pgp", "key", "hot", "short",
        "music", "piano", "dict", "json", "yaml", "config", "setting", "settings", "registry", "storage", "s3",
        "bucket", "kv", "cluster", "range", "hash_key", "message", "event", "metric", "label", "tag", "field",
    }
)  # fmt: skip
_KEY_QUALIFIERS = frozenset(
    {
        "api", "access", "secret", "private", "auth", "signing", "encryption", "master", "session", "app",
        "client", "service", "admin", "deploy", "license", "webhook", "account", "x", "subscription", "consumer",
    }
)  # fmt: skip
_NON_SECRET_LAST = frozenset(
    {
        "count", "limit", "max", "min", "ttl", "type", "url", "uri", "endpoint", "expiry", "expires", "expiration",
        "length", "len", "usage", "file", "path", "name", "field", "header", "param", "format", "mode", "prefix",
        "size", "timeout", "id", "ids", "policy", "rotation", "version", "enabled", "required", "hint", "label",
        "at", "used", "budget", "window", "strategy", "provider", "method", "source", "env", "var", "location",
        "manager", "rule", "rules", "regex", "pattern", "algorithm", "alg", "scheme", "scope", "scopes",
        "audience", "issuer", "kind", "class", "schema", "index", "cost", "price", "rate", "ratio", "total",
        "changed", "updated", "created", "age", "days", "strength", "attempts", "retries", "valid", "invalid",
        "error", "errors", "message", "status", "expired", "lifetime", "interval", "tokens", "keys", "secrets",
        "passwords", "credentials_path", "arn", "ref", "store", "vault", "reset", "refresh", "fingerprint",
        "hash_algorithm", "per", "second", "seconds", "minute", "ms", "s", "tokenizer", "estimate",
        "ttl_seconds", "name_prefix", "description", "doc", "docs", "help", "example", "placeholder", "input",
        "required_fields", "policy_version", "config", "region", "bucket", "user", "username", "login", "email",
    }
)  # fmt: skip
_PLACEHOLDER_SHAPE = re.compile(r"^(?:<[^>]*>|\$\{[^}]*\}|\{\{.*\}\}|\$[A-Z_][A-Z0-9_]*|%\(.*\)s|\*+|[xX]{3,}|\.{3,})$")
_PLACEHOLDER_FIRST = "<${%*xX."  # how each `_PLACEHOLDER_SHAPE` alternative starts
_PLACEHOLDER_WORDS = frozenset(
    {
        "null", "none", "nil", "true", "false", "undefined", "empty", "redacted", "hidden", "masked", "string",
        "str", "required", "optional", "env", "secret", "password", "token", "your_password", "your_api_key",
        "your-api-key", "changeme_later",
    }
)  # fmt: skip


def placeholder_value(value: str) -> bool:
    """Template and config placeholders (`${DB_PASSWORD}`, `<token>`, `null`) are not secrets."""
    if value.lower() in _PLACEHOLDER_WORDS:
        return True
    return value[:1] in _PLACEHOLDER_FIRST and _PLACEHOLDER_SHAPE.match(value) is not None


_NEXT_KEY = re.compile(r"""^[\\]*["']?\s*(?:[,}\]]|$)""")


@functools.lru_cache(maxsize=4096)
def key_kind(key: str) -> str | None:
    """'password' for password-like keys (any value is secret), 'token' for token/key-like ones, None otherwise."""
    words = [w.lower() for w in _KEY_WORDS.split(key.strip("-_.")) if w]
    if not words or words[-1] in _NON_SECRET_LAST:
        return None
    joined = "".join(words)
    if any(w in _PASSWORD_WORDS for w in words) or "password" in joined or "passwd" in joined:
        return "password"
    if "secret" in joined:
        return "password"
    if any(w in _TOKEN_WORDS for w in words):
        return "token"
    for prev, word in itertools.pairwise(words):
        if word == "key" and prev in _KEY_QUALIFIERS:
            return "token"
    if joined.endswith(("apikey", "accesskey", "secretkey", "privatekey", "authkey", "authtoken", "accesstoken")):
        return "token"
    if joined.endswith(("pwd", "passwd", "pass", "pw")) and not joined.endswith(("bypass", "compass", "overpass")):
        return "password"  # `ADMINPWD`, `keystorepass`
    if words[-1].endswith("key") and len(joined) > 3 and words[-1] not in _WORDS_ENDING_IN_KEY:
        qualifier = words[-2] if len(words) >= 2 and words[-1] == "key" else words[-1][:-3]
        if qualifier and qualifier not in _NON_SECRET_KEY_QUALIFIERS:
            return "token"  # `hmac_key`, `MASTERKEY`, `deploy_key`
    return None


def secret_value_ok(kind: str, value: str) -> bool:
    value = value.strip()
    if len(value) < 4 or placeholder_value(value) or value.count(value[0]) == len(value):  # one repeated char
        return False
    if kind == "password":
        return not (value.isdigit() and len(value) < 4)
    if value.isdigit() or len(value) < 12:
        return False
    return (len(value) >= 24 or v.char_classes(value) >= 2) and v.entropy_at_least(value, 3.0)


# `_KEY_HINT`'s words (`pwd` starts with `pw`, so its positions are among those)
_HINT_WORDS = ("pass", "secret", "token", "credential", "key", "auth", "pw", "_pat")


_HINT_SEARCH = AhoCorasick(list(_HINT_WORDS)).find_matches_as_indexes


def _hint_starts(lowered: str) -> list[int]:
    """Every position where one of the key hint words starts, in order (one Aho-Corasick pass; the words can
    overlap, `passecret`, so every occurrence is reported)."""
    try:
        found = _HINT_SEARCH(lowered, overlapping=True)
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form
        return _hint_starts_slow(lowered)
    return sorted([start for _, start, _ in found]) if len(found) > 1 else [start for _, start, _ in found]


def _hint_starts_slow(lowered: str) -> list[int]:
    """`_hint_starts` by one substring search per word."""
    starts: list[int] = []
    for word in _HINT_WORDS:
        i = lowered.find(word)
        while i != -1:
            starts.append(i)
            i = lowered.find(word, i + 1)
    starts.sort()
    return starts


class AssignmentSecretRecognizer:
    """`password=...`, `"api_key": "..."`, YAML/.env/ini lines, CLI flags and JSON-escaped bodies.

    Finds key hints with one case-insensitive scan, widens each hit to the whole key, classifies the key by its
    words (`max_tokens` and `token_url` are not secrets) and checks the value (placeholders and low-entropy
    token values are kept).
    """

    kind = "SECRET"
    priority = 80
    keywords = ("pass", "pwd", "secret", "token", "credential", "key", "auth", "pw", "_pat")

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        if len(lowered) != len(text):  # a few Unicode letters change length when lowered: keep offsets aligned
            lowered = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
        out: list[Finding] = []
        last_key_end = -1
        n = len(text)
        resume = 0
        for hint_start in _hint_starts(lowered):
            # what `_KEY_HINT.finditer` would do, trying only where a hint word starts: C substring searches
            # find those far faster than the regex engine can scan for the alternation
            if hint_start < resume:
                continue
            hit = _KEY_HINT.match(lowered, hint_start)
            if hit is None:
                continue
            resume = hit.end()
            if hint_start < last_key_end:
                continue
            end = last_key_end = hit.end("rest")
            left = _KEY_LEFT_REVERSED.match(text[max(0, hint_start - 64) : hint_start][::-1])
            start = hint_start - left.end()  # type: ignore[union-attr]
            if start >= 1 and text[start - 1] == "\\" and text[start] in "nrt":
                start += 1
            kind = key_kind(text[start:end])
            if kind is None:
                continue
            cli = start >= 1 and text[start - 1] == "-"
            m = (_CLI_FLAG_TAIL if cli and end < n and text[end] == " " else _ASSIGN_TAIL).match(text, end)
            if m is None:
                continue
            group = "qv" if m.group("v") is None and "qv" in m.re.groupindex else "v"
            value = m.group(group)
            if value is not None and secret_value_ok(kind, value):
                out.append(Finding(m.start(group), m.end(group), self.kind, self.priority))
        if "pass" in lowered or "pwd" in lowered:
            for m in _PROSE.finditer(lowered):
                value = text[m.start("v") : m.end("v")].rstrip(".,;:!?")
                if v.char_classes(value) >= 2 and not placeholder_value(value):
                    out.append(Finding(m.start("v"), m.start("v") + len(value), self.kind, self.priority))
        return out


def default_recognizers() -> list[Recognizer]:
    """Every structured recognizer (no NER): PII first, then secrets; overlap resolution uses priorities."""
    from evolvable.governance.redaction.addresses import AddressRecognizer
    from evolvable.governance.redaction.names import NameRecognizer

    return [*pii_recognizers(), *secret_recognizers(), AddressRecognizer(), NameRecognizer()]


def kinds(recognizers: Sequence[Recognizer]) -> list[str]:
    return sorted({r.kind for r in recognizers})
