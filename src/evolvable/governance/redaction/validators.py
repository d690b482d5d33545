"""Checksums and shape rules that turn a regex candidate into a finding (or drop it).

Validators are what keep hard negatives alive: a 16-digit order number fails Luhn,
a random `DE12...` string fails mod-97, a private IP is not a public one.
"""

from __future__ import annotations

import bisect
import ipaddress
import math
import re
from collections import Counter

_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip

# Kept in the clear: addresses that identify nobody outside the local network.
_KEPT_NETWORKS = [
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32",
        "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
    )
]  # fmt: skip


_NON_DIGIT_BYTES = bytes(b for b in range(256) if not 48 <= b <= 57)
# a digit's byte -> the byte of the digit its Luhn doubling sums to (2d, or 2d - 9 above 4)
_LUHN_DOUBLED_BYTES = bytes.maketrans(b"0123456789", b"0246813579")


def digits_of(value: str) -> str:
    """The characters of `value` that `str.isdigit` accepts (a C bytes translate for the usual ASCII text, about
    three times cheaper than `str.translate` with a deletion table)."""
    if value.isascii():
        return value.encode("ascii").translate(None, _NON_DIGIT_BYTES).decode("ascii")
    return "".join(filter(str.isdigit, value))


def luhn_ok(digits: str) -> bool:
    if digits.isascii() and digits.isdigit():
        # the digits' byte sums: each byte is 48 more than its digit
        raw = digits.encode("ascii")
        total = sum(raw[-1::-2]) + sum(raw[-2::-2].translate(_LUHN_DOUBLED_BYTES)) - 48 * len(raw)
        return total % 10 == 0
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


_CARD_PREFIXES = ("6011", "65", "644", "645", "646", "647", "648", "649", "622")  # Discover/UnionPay
_MAESTRO_PREFIXES = ("5018", "5020", "5038", "6304", "6759", "6761", "6763", "62")  # Maestro/UnionPay


def card_ok(number: str) -> bool:
    """13-19 digits, a known issuer prefix, and a valid Luhn checksum."""
    return card_digits_ok(digits_of(number))


def card_digits_ok(digits: str) -> bool:
    """`card_ok` for a string of digits only."""
    n = len(digits)
    if not 13 <= n <= 19 or digits.count(digits[0]) == n:  # one digit repeated is no card
        return False
    return (digits[0] == "4" or _non_visa_issuer(digits, n)) and luhn_ok(digits)


def _non_visa_issuer(digits: str, n: int) -> bool:
    two, four = int(digits[:2]), int(digits[:4])
    return (
        51 <= two <= 55  # Mastercard
        or 2221 <= four <= 2720
        or (two in (34, 37) and n == 15)  # Amex
        or digits.startswith(_CARD_PREFIXES)
        or 3528 <= four <= 3589  # JCB
        or two in (36, 38, 30)  # Diners
        or digits.startswith(_MAESTRO_PREFIXES)
    )


def iban_ok(candidate: str) -> bool:
    iban = candidate.replace(" ", "").upper()
    expected = _IBAN_LENGTHS.get(iban[:2])
    if expected is None or len(iban) != expected:
        return False
    rearranged = iban[4:] + iban[:4]
    try:
        return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1
    except ValueError:
        return False


def ssn_ok(candidate: str) -> bool:
    digits = digits_of(candidate)
    if len(digits) != 9:
        return False
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _merged(ranges: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Overlapping inclusive ranges merged: (sorted starts, their ends), for a bisect lookup."""
    starts: list[int] = []
    ends: list[int] = []
    for lo, hi in sorted(ranges):
        if ends and lo <= ends[-1] + 1:
            ends[-1] = max(ends[-1], hi)
        else:
            starts.append(lo)
            ends.append(hi)
    return starts, ends


_KEPT_RANGES = {
    version: _merged([(int(n[0]), int(n[-1])) for n in _KEPT_NETWORKS if n.version == version]) for version in (4, 6)
}


def _kept(value: int, version: int) -> bool:
    starts, ends = _KEPT_RANGES[version]
    i = bisect.bisect_right(starts, value) - 1
    return i >= 0 and value <= ends[i]


def ipv4_value(dotted: str) -> int | None:
    """The integer of an ASCII dotted quad of octets 0-255 without leading zeros, else None."""
    octets = IPV4_OCTETS.fullmatch(dotted)
    return None if octets is None else ipv4_octets_value(octets)


def ipv4_octets_value(octets: re.Match[str]) -> int:
    """The integer of an `IPV4_OCTETS` match."""
    a, b, c, d = octets.groups()
    return int(a) << 24 | int(b) << 16 | int(c) << 8 | int(d)


def public_ipv4_value(value: int) -> bool:
    return not _kept(value, 4)


def public_ip(candidate: str) -> bool:
    """True for an address that can identify someone on the internet (loopback/private/link-local kept)."""
    if candidate.count(".") == 3 and ":" not in candidate:
        value = _ipv4_int(candidate)
        return value is not None and not _kept(value, 4)
    parsed = _parse_ip(candidate.split("%", 1)[0])
    if parsed is None:
        return False
    version, value = parsed
    if version == 6 and value >> 32 == 0xFFFF:  # IPv4-mapped (::ffff:a.b.c.d): judged as the IPv4 address
        version, value = 4, value & 0xFFFFFFFF
    return not _kept(value, version)


_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4_OCTETS = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}")


def _ipv4_int(candidate: str) -> int | None:
    """The address as an integer, or None unless it is four decimal octets without leading zeros."""
    if candidate.isascii():
        return ipv4_value(candidate)
    value = 0
    for part in candidate.split("."):
        if not part.isdigit() or len(part) > 3 or (len(part) > 1 and part[0] == "0"):
            return None
        octet = int(part)
        if octet > 255:
            return None
        value = value * 256 + octet
    return value


_HEXTET = r"[0-9A-Fa-f]{1,4}+"  # possessive: hextets end at a colon, so nothing is ever given back
_IPV6_FULL = re.compile(rf"{_HEXTET}(?::{_HEXTET}){{7}}")
# Greedy groups, not possessive ones (`*+`, `?+` after a group): CPython before 3.11.5 matched those wrongly
# (gh-106052, gh-100061), and Debian 12's Python 3.11.2 then found no `::` address at all. Hextets cannot
# contain the colons between them, so the greedy form accepts exactly the same texts.
_IPV6_GAP = re.compile(rf"((?:{_HEXTET}(?::{_HEXTET})*)?)::((?:{_HEXTET}(?::{_HEXTET})*)?)")
_EIGHT_HEXTETS = "%4s" * 8


def _ipv6_int(candidate: str) -> int | None:
    """The IPv6 forms without an IPv4 part or a zone (eight hextets, or one `::` with at most seven), parsed as
    `ipaddress` would but in a fraction of its time; None for an ASCII text that is none of them."""
    if "::" in candidate:
        gap = _IPV6_GAP.fullmatch(candidate)
        if gap is None:
            return None
        head, tail = gap.groups()
        high = head.split(":") if head else []
        low = tail.split(":") if tail else []
        if len(high) + len(low) > 7:
            return None
        hextets = (*high, *(["0"] * (8 - len(high) - len(low))), *low)
    elif _IPV6_FULL.fullmatch(candidate) is not None:
        hextets = tuple(candidate.split(":"))
    else:
        return None
    return int((_EIGHT_HEXTETS % hextets).replace(" ", "0"), 16)  # each padded to four digits, then one int()


def _parse_ip(candidate: str) -> tuple[int, int] | None:
    """(version, integer value) as `ipaddress.ip_address` parses it, or None; a text with a colon can only be
    IPv6 and one without only IPv4, so only that parser runs (no failed parse and exception first)."""
    if ":" in candidate and candidate.isascii() and "." not in candidate and "%" not in candidate:
        value = _ipv6_int(candidate)  # without an IPv4 part or a zone, these forms are all `ipaddress` accepts
        return None if value is None else (6, value)
    try:
        addr = ipaddress.IPv6Address(candidate) if ":" in candidate else ipaddress.IPv4Address(candidate)
    except ValueError:
        return None
    return addr.version, int(addr)


def parses_as_ip(candidate: str) -> bool:
    return _parse_ip(candidate) is not None


def nanp_ok(digits: str) -> bool:
    """A North American number: area code and exchange cannot start with 0 or 1."""
    if len(digits) == 11 and digits[0] == "1":
        digits = digits[1:]
    return len(digits) == 10 and digits[0] not in "01" and digits[3] not in "01"


_C_LOG_C = [0.0] + [c * math.log2(c) for c in range(1, 1025)]


def shannon_entropy(text: str) -> float:
    if not text:
        return 0.0
    n = len(text)
    counts = Counter(text).values()
    if n < len(_C_LOG_C):
        return math.log2(n) - sum(map(_C_LOG_C.__getitem__, counts)) / n
    return math.log2(n) - sum(c * math.log2(c) for c in counts) / n


def entropy_at_least(text: str, bits: float) -> bool:
    """`shannon_entropy(text) >= bits`, decided the same way but faster for the ASCII values secrets are: the
    byte counts come from one loop over the encoded text (compiled, ~10x cheaper than `Counter` and 4-5x than
    numpy's `bincount` with its call overheads at these lengths), summed in byte order rather than the order
    `shannon_entropy` sums them, so a result within 1e-9 of `bits` (rounding could differ there, by far less) is
    settled by `shannon_entropy`."""
    n = len(text)
    if not n or n >= len(_C_LOG_C) or not text.isascii():
        return shannon_entropy(text) >= bits
    counts = [0] * 128
    for byte in text.encode("ascii"):
        counts[byte] += 1
    total = 0.0
    for count in counts:
        if count:
            total += _C_LOG_C[count]
    entropy = math.log2(n) - total / n
    if abs(entropy - bits) <= 1e-9:
        return shannon_entropy(text) >= bits
    return entropy >= bits


_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_DIGIT = frozenset("0123456789")
_DIGIT_BYTES = b"0123456789"


def char_classes(text: str) -> int:
    """How many of lower-case, upper-case and digit (ASCII) occur."""
    if text.isascii():  # C string operations instead of a set of the characters
        has_digit = len(text.encode().translate(None, _DIGIT_BYTES)) != len(text)
        return (text != text.upper()) + (text != text.lower()) + has_digit
    chars = set(text)
    return (not chars.isdisjoint(_LOWER)) + (not chars.isdisjoint(_UPPER)) + (not chars.isdisjoint(_DIGIT))


_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")


def plainly_safe_identifier(value: str) -> bool:
    """An identifier that cannot hold a recognized value (a word-like name with fewer than 7 digits and no `@`):
    what the fail-closed fallbacks keep, so a failure costs the run's content but not its shape (`lookup_order`)."""
    return _PLAIN_IDENTIFIER.fullmatch(value) is not None and sum(c.isdigit() for c in value) < 7
