"""Checksums and shape rules that turn a regex candidate into a finding (or drop it).

Validators are what keep hard negatives alive: a 16-digit order number fails Luhn,
a random `DE12...` string fails mod-97, a private IP is not a public one.
"""

from __future__ import annotations

import ipaddress
import math
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


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def card_ok(number: str) -> bool:
    """13-19 digits, a known issuer prefix, and a valid Luhn checksum."""
    digits = "".join(c for c in number if c.isdigit())
    n = len(digits)
    if not 13 <= n <= 19 or len(set(digits)) < 2:
        return False
    two, four = int(digits[:2]), int(digits[:4])
    issuer = (
        digits[0] == "4"  # Visa
        or 51 <= two <= 55  # Mastercard
        or 2221 <= four <= 2720
        or (two in (34, 37) and n == 15)  # Amex
        or digits.startswith(("6011", "65", "644", "645", "646", "647", "648", "649", "622"))  # Discover/UnionPay
        or 3528 <= four <= 3589  # JCB
        or two in (36, 38, 30)  # Diners
        or digits.startswith(("5018", "5020", "5038", "6304", "6759", "6761", "6763", "62"))  # Maestro/UnionPay
    )
    return issuer and luhn_ok(digits)


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
    digits = "".join(c for c in candidate if c.isdigit())
    if len(digits) != 9:
        return False
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


_KEPT_RANGES = {
    version: [(int(n.network_address), int(n.broadcast_address)) for n in _KEPT_NETWORKS if n.version == version]
    for version in (4, 6)
}


def public_ip(candidate: str) -> bool:
    """True for an address that can identify someone on the internet (loopback/private/link-local kept)."""
    if candidate.count(".") == 3 and ":" not in candidate:
        value = _ipv4_int(candidate)
        if value is None:
            return False
        return not any(lo <= value <= hi for lo, hi in _KEPT_RANGES[4])
    try:
        addr = ipaddress.ip_address(candidate.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    value = int(addr)
    return not any(lo <= value <= hi for lo, hi in _KEPT_RANGES[addr.version])


def _ipv4_int(candidate: str) -> int | None:
    value = 0
    for part in candidate.split("."):
        if not part.isdigit() or len(part) > 3 or (len(part) > 1 and part[0] == "0"):
            return None
        octet = int(part)
        if octet > 255:
            return None
        value = value * 256 + octet
    return value


def parses_as_ip(candidate: str) -> bool:
    try:
        ipaddress.ip_address(candidate)
        return True
    except ValueError:
        return False


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


_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_DIGIT = frozenset("0123456789")


def char_classes(text: str) -> int:
    """How many of lower-case, upper-case and digit (ASCII) occur."""
    chars = set(text)
    return (not chars.isdisjoint(_LOWER)) + (not chars.isdisjoint(_UPPER)) + (not chars.isdisjoint(_DIGIT))
