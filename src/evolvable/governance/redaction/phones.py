"""National-format phone numbers of many countries (and spaced US SSNs), validated by `phonenumbers`.

`030/12345678`, `06 12 34 56 78`, `0121 233 6263`, `612 34 56 78`, `(11) 96128-9913`, `0044 20 7946 0958`: a
regex cannot tell these from order numbers and dates, Google's phone metadata (libphonenumber, as `phonenumbers`)
can. Candidates are runs of digits and separators found by a byte translate; most are ruled out by their shape
(a date, a version, glued to an id, no separators and no phone word) before any region is tried. A survivor is a
phone if it is a valid number of one of `CANDIDATE_REGIONS`: per region the trunk prefix is stripped and the
national number matched against the region's general pattern (a compiled regex) before the full validity check
(`is_valid_number_for_region`, ~6 us), so rejecting a candidate costs ~50 regex matches, not 50 parses.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import phonenumbers
from phonenumbers import PhoneMetadata

from evolvable.governance.redaction import validators as v
from evolvable.governance.redaction.findings import Finding, free_left

# Chosen a priori as the countries most support traffic comes from (G20, the EU and EFTA, large English-, Spanish-
# and Portuguese-speaking markets); national numbers of other countries are caught when written with `+`/`00`.
CANDIDATE_REGIONS = (
    "US", "GB", "DE", "FR", "ES", "IT", "NL", "BE", "CH", "AT", "IE", "PT", "PL", "SE", "NO", "DK", "FI", "CZ", "GR",
    "HU", "RO", "TR", "IN", "JP", "KR", "CN", "SG", "AU", "NZ", "BR", "MX", "AR", "CO", "CL", "ZA", "NG", "KE", "MA",
    "EG", "AE", "SA", "IL", "PH", "ID", "MY", "TH", "VN", "RU", "UA", "CA",
)  # fmt: skip

_DATE_LIKE = re.compile(
    r"(?:(?:19|20)\d\d[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.](?:19|20)?\d\d)(?:[ T]\d{1,2})?$"
    r"|(?:19|20)\d\d[-/.]\d{1,2}[-/.]\d{1,2}\b"
)
_SSN_SHAPE = re.compile(r"\d{3}(?P<sep> - | |\.|-)\d{2}(?P=sep)\d{4}")
_PHONE_WORDS = re.compile(
    r"(?:phone|tel|mobile|mobil|cell|call|ring|sms|whatsapp|fax|handy|téléphone|telefono|teléfono|telefon|"
    r"reach|contact|answering|(?:my|new|old|your|his|her|their|our) number)[^\n]{0,24}$"
)
_GROUPED = re.compile(r"^\(?\+?\d{1,6}\)?(?:(?:[ .\-/]{1,2}|(?<=\)))\(?\d{1,9}\)?){1,6}$")
_ZERO_GROUP = re.compile(r"(?:^|[ .\-/])0(?:$|[ .\-/])")
_DOTTED_QUAD = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


_Desc = tuple[frozenset[int], re.Pattern[str]]
"""A number description: its possible lengths (empty: any) and national number pattern, compiled."""


@dataclass(frozen=True, slots=True)
class _Region:
    code: str
    country_code: int
    trunk_literal: str | None
    """The trunk prefix when it is plain digits (`0`, `1`, `8`): stripped by a string test."""
    trunk: re.Pattern[str] | None
    """Otherwise the trunk prefix pattern (Brazil's carrier codes), or None."""
    lengths: frozenset[int]
    typed: re.Pattern[str]
    """Any number type's national pattern (fixed line, mobile, toll free, ...): a match is nearly always valid."""
    general: _Desc
    types: tuple[_Desc, ...]
    """The general description and the number types, in the order libphonenumber's validity check tries them."""


_TYPES = (
    "fixed_line", "mobile", "toll_free", "premium_rate", "shared_cost", "personal_number", "voip", "pager", "uan",
    "voicemail",
)  # fmt: skip
# the order of `phonenumberutil._number_type_helper`; mobile is tried only where its pattern is not fixed line's
_VALIDITY_ORDER = (
    "premium_rate", "toll_free", "shared_cost", "voip", "personal_number", "pager", "uan", "voicemail", "fixed_line",
)  # fmt: skip


def _desc(desc: object) -> _Desc | None:
    """A description as `_is_number_matching_desc` reads it; None for one that never matches."""
    pattern = getattr(desc, "national_number_pattern", None)
    if not pattern:
        return None
    return frozenset(getattr(desc, "possible_length", None) or ()), re.compile(pattern)


def _region(code: str) -> _Region | None:
    meta = PhoneMetadata.metadata_for_region(code)
    if meta is None or meta.country_code is None or meta.general_desc is None:
        return None
    trunk = meta.national_prefix_for_parsing or meta.national_prefix
    literal = trunk if trunk and trunk.isdigit() else None
    descs = [d for d in (getattr(meta, t, None) for t in _TYPES) if d is not None and d.national_number_pattern]
    lengths = {n for d in descs for n in (d.possible_length or ())}
    general = _desc(meta.general_desc)
    if not descs or general is None:
        return None
    order = _VALIDITY_ORDER if meta.same_mobile_and_fixed_line_pattern else (*_VALIDITY_ORDER, "mobile")
    types = tuple(d for d in (_desc(getattr(meta, t, None)) for t in order) if d is not None)
    return _Region(
        code=code,
        country_code=meta.country_code,
        trunk_literal=literal,
        trunk=re.compile(trunk) if trunk and literal is None else None,
        lengths=frozenset(lengths or meta.general_desc.possible_length or range(4, 18)),
        typed=re.compile("|".join(f"(?:{d.national_number_pattern})" for d in descs)),
        general=general,
        types=types,
    )


_REGIONS = tuple(r for r in map(_region, CANDIDATE_REGIONS) if r is not None)
_BY_COUNTRY_CODE: dict[int, tuple[_Region, ...]] = {}
for _code, _regions_of_code in phonenumbers.COUNTRY_CODE_TO_REGION_CODE.items():
    _BY_COUNTRY_CODE[_code] = tuple(r for r in map(_region, _regions_of_code) if r is not None)


def _number(country_code: int, nsn: str) -> phonenumbers.PhoneNumber:
    number = phonenumbers.PhoneNumber(country_code=country_code, national_number=int(nsn))
    zeros = len(nsn) - len(nsn.lstrip("0"))
    if zeros:
        number.italian_leading_zero = True
        number.number_of_leading_zeros = zeros
    return number


def _valid_in(region: _Region, nsn: str) -> bool:
    """`nsn` (national significant number) is a valid number of `region`: a possible length and a number type's
    pattern (one compiled regex) before the full validity check, which then runs once per accepted number."""
    if len(nsn) not in region.lengths or region.typed.fullmatch(nsn) is None:
        return False
    if not nsn.strip("0"):  # all zeros: libphonenumber's number object reads back with one zero more
        return phonenumbers.is_valid_number_for_region(_number(region.country_code, nsn), region.code)
    return valid_for_region(region, nsn)


def valid_for_region(region: _Region, nsn: str) -> bool:
    """`phonenumbers.is_valid_number_for_region` for a national significant number of `region`, read off the
    same metadata without building a number object (a third of the cost): the general description matches, then
    any number type's (`phonenumberutil._number_type_helper`: possible lengths, when listed, then the pattern)."""
    n = len(nsn)
    lengths, pattern = region.general
    if (lengths and n not in lengths) or pattern.fullmatch(nsn) is None:
        return False
    for lengths, pattern in region.types:
        if (not lengths or n in lengths) and pattern.fullmatch(nsn) is not None:
            return True
    return False


def _index(regions: tuple[_Region, ...]) -> dict[tuple[str, int], tuple[_Region, ...]]:
    """(trunk prefix written, national number length) -> the regions, in `CANDIDATE_REGIONS` order, where a
    number so written can be valid: `valid_national` then tries only those (a few instead of 50)."""
    index: dict[tuple[str, int], list[_Region]] = {}
    for region in regions:
        for length in region.lengths:
            index.setdefault(("", length), []).append(region)
            if region.trunk_literal:
                index.setdefault((region.trunk_literal, length), []).append(region)
    return {key: tuple(found) for key, found in index.items()}


_INDEX = _index(_REGIONS)
_TRUNKS = tuple(sorted({r.trunk_literal for r in _REGIONS if r.trunk_literal}))
_PATTERN_TRUNK_REGIONS = tuple(r for r in _REGIONS if r.trunk is not None)


@functools.lru_cache(maxsize=4096)
def valid_national(digits: str) -> bool:
    """Whether `digits` (a number as written nationally, without country code) is a valid number of a region."""
    for trunk in _TRUNKS:
        if digits.startswith(trunk):
            nsn = digits[len(trunk) :]
            for region in _INDEX.get((trunk, len(nsn)), ()):
                if region.trunk_literal == trunk and _valid_in(region, nsn):
                    return True
    for region in _INDEX.get(("", len(digits)), ()):
        if _valid_in(region, digits):
            return True
    for region in _PATTERN_TRUNK_REGIONS:  # trunk prefixes with carrier codes (Brazil, ...)
        m = region.trunk.match(digits)  # type: ignore[union-attr]
        if m is not None and m.end() and _valid_in(region, digits[m.end() :]):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def valid_international(digits: str) -> bool:
    """Whether `digits` (country code first, no `+` or `00`) is a valid number."""
    for size in (1, 2, 3):
        for region in _BY_COUNTRY_CODE.get(int(digits[:size]), ()) if len(digits) > size else ():
            nsn = digits[size:]
            literal = region.trunk_literal
            if _valid_in(region, nsn) or (
                region.code in _TRUNK_AFTER_CODE and literal and nsn.startswith(literal) and _valid_in(region, nsn[1:])
            ):
                return True
    return False


_TRUNK_AFTER_CODE = frozenset({"GB", "DE", "AT", "CH", "NL", "BE", "FR", "IE"})
"""Where `+44 (0)20 ...` (the trunk prefix kept after the country code) is a common way of writing."""


class NationalPhoneChecker:
    """Called by the number recognizer for each run of digits and separators it finds (8-15 digits, no `+`):
    national-format phone numbers of many countries, `00` international ones, and spaced/dotted US SSNs."""

    ignores_dates = True
    """`check` finds nothing in a run `_DATE_LIKE` matches: the number recognizer may skip such runs unasked."""

    def check(self, text: str, start: int, end: int, digits: int, out: list[Finding]) -> None:
        run = text[start:end]
        if _DATE_LIKE.match(run):
            return  # the commonest run: a date or a timestamp
        if (end < len(text) and (text[end].isalnum() or text[end] == "_")) or not free_left(text, start):
            return
        if digits == end - start and ((run[0] != "0" and not _phone_word_before(text, start)) or _epoch(run)):
            return  # bare digits: only after a phone word (order ids and amounts look the same), never a Unix time
        if (ssn := _SSN_SHAPE.fullmatch(run)) is not None:
            if ssn.group("sep") != "-" and v.ssn_ok(v.digits_of(run)):
                out.append(Finding(start, end, "SSN", 60))
            return
        if _phone(text, start, run, v.digits_of(run)):
            out.append(Finding(start, end, "PHONE", 50))

    def check_local(self, text: str, start: int, end: int, out: list[Finding]) -> None:
        """A local number without its area code (`476 1540`, `66 72 64`: 6-7 digits in groups). No metadata can
        validate it, so it counts only with a phone word before it (`call me at`, `Phone:`) or a line label right
        after it (`476 1540 office`, `66 72 64-Fax`)."""
        run = text[start:end]
        if _LOCAL.fullmatch(run) is None or _DATE_LIKE.match(run) or _TIME_LIKE.fullmatch(run):
            return
        if (end < len(text) and (text[end].isalnum() or text[end] == "_")) or not free_left(text, start):
            return
        if _phone_word_before(text, start) or _LOCAL_LABEL_AFTER.match(text, end) is not None:
            out.append(Finding(start, end, "PHONE", 50))


_LOCAL = re.compile(r"\d{2,4}(?:[ .\-]\d{2,4}){1,2}")
_TIME_LIKE = re.compile(r"\d{1,2}[.:]\d{2}(?:[.:]\d{2})?")
_LOCAL_LABEL_AFTER = re.compile(r"(?i:[ \-]?\(?(?:office|fax|mobile|cell|home|work|direct|desk|tel|phone)\b)")


def _epoch(run: str) -> bool:
    """A Unix time in seconds or milliseconds, 2017-2033 (`1760157799`, `1761916694073`)."""
    return len(run) in (10, 13) and run[0] == "1" and run[1] in "56789"


def _phone_word_before(text: str, start: int) -> bool:
    return _PHONE_WORDS.search(text[max(0, start - 32) : start].lower()) is not None


def _phone(text: str, start: int, run: str, digits: str) -> bool:
    if run.startswith("00"):
        return len(digits) >= 10 and valid_international(digits[2:])
    if _DOTTED_QUAD.fullmatch(run) and v.IPV4_OCTETS.fullmatch(run):
        return False  # an IPv4 address (`40.67.39.09`, with a leading zero, is a phone number)
    if "." in run and (" " in run or (run.count(".") >= 2 and _after_version_word(text, start))):
        return False  # `200 0.85` (a status and a latency), `version 10.0.19045.3803`
    if _ZERO_GROUP.search(run):
        return False  # a lone `0` group: versions (`103.0.4843.71`), decimals
    if len(digits) != len(run) and not _GROUPED.match(run):
        return False
    return valid_national(digits)


def _after_version_word(text: str, start: int) -> bool:
    return text[max(0, start - 10) : start].lower().rstrip().endswith(("version", "ver", "v", "build", "release"))


__all__ = ["CANDIDATE_REGIONS", "NationalPhoneChecker", "valid_international", "valid_national"]
