"""The redaction engine's fast paths must decide exactly what the plain code they replace decides.

Each shortcut (byte-translate scans, match starts found by substring search, the hand-written IPv6 parser, the
numpy entropy) is compared with its reference on seeded random texts built from the characters that matter.
"""

from __future__ import annotations

import ipaddress
import math
import random
import re
import string
from collections import Counter

import pytest

from evolvable.governance.redaction import recognizers as r
from evolvable.governance.redaction import validators as v


def _texts(rng: random.Random, pieces: list[str], count: int, most: int = 20) -> list[str]:
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, most))) for _ in range(count)]


def test_number_runs_are_the_regex_runs() -> None:
    rng = random.Random(1)
    pieces = [*"0123456789", *" .()+-", "x", "\n", "_", "/", "\u0663", "\u00e9", "4111", "  ", "..."]
    for text in _texts(rng, pieces, 4000, most=40):
        assert r.number_runs(text) == [m.span() for m in r._NUMBER_RUN.finditer(text)], text


def _reference_ip(text: str) -> tuple[int, int] | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    return address.version, int(address)


def test_ip_parsing_agrees_with_ipaddress() -> None:
    rng = random.Random(2)
    hextet = ["", "0", "1", "db8", "ffff", "FFFF", "12345", "g1", "fe80"]
    for _ in range(6000):
        text = ":".join(rng.choice(hextet) for _ in range(rng.randint(1, 10)))
        cut = rng.randint(0, len(text))
        text = text[:cut] + rng.choice(["", "::", ":", ":::", "::1.2.3.4", "%eth0", ".", " ", "/64"]) + text[cut:]
        assert v._parse_ip(text) == _reference_ip(text), text
    octets = ["0", "00", "01", "9", "10", "199", "249", "255", "256", "999", "1000", "", "\u0661"]
    for _ in range(3000):
        text = ".".join(rng.choice(octets) for _ in range(rng.choice([3, 4, 4, 5])))
        assert v._parse_ip(text) == _reference_ip(text), text


def _reference_entropy(text: str) -> float:
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if text else 0.0


def test_entropy_threshold_matches_the_exact_entropy() -> None:
    rng = random.Random(3)
    alphabets = [string.ascii_letters + string.digits, "ab", "abcdefgh", "0123456789abcdef", "aB1\u00e9"]
    texts = ["".join(rng.choice(rng.choice(alphabets)) for _ in range(rng.randint(0, 150))) for _ in range(3000)]
    texts += [string.ascii_letters[:k] * repeat for k in (8, 16) for repeat in range(2, 40)]  # exactly 3 or 4 bits
    for text in texts:
        for bits in (3.0, 3.5, 4.0):
            assert v.entropy_at_least(text, bits) == (v.shannon_entropy(text) >= bits), (text, bits)
        assert v.shannon_entropy(text) == pytest.approx(_reference_entropy(text), abs=1e-9)


_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits)


def test_character_classes_match_a_set_of_the_characters() -> None:
    rng = random.Random(4)
    for text in _texts(rng, [*"aZ5", "_", " ", "\u00e9", "\u212a", "x9"], 2000):
        chars = set(text)
        expected = sum(not chars.isdisjoint(group) for group in _CLASSES)
        assert v.char_classes(text) == expected, text


@pytest.mark.parametrize("kind", ["AWS_SECRET_KEY", "PASSWORD", "STRIPE_KEY"])
def test_match_starts_give_the_finditer_matches(kind: str) -> None:
    recognizer = next(x for x in r.secret_recognizers() if isinstance(x, r.RegexRecognizer) and x.kind == kind)
    assert recognizer.starts is not None
    rng = random.Random(5)
    pieces = {
        "AWS_SECRET_KEY": ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "abcXYZ019", "/+", "=", " ", "\u00e9", "x"],
        "PASSWORD": ["://", "postgres", "a", "B1", "+", ".", "-", ":", "/", "@", " ", "user:pw", "\u00e9"],
        "STRIPE_KEY": ["sk_live_", "rk_test_", "k_prod_", "whsec_", "s", "w", "_", "-", "abcdefghij0123456789AB"],
    }[kind]
    for text in _texts(rng, pieces, 3000, most=14):
        starts = recognizer.starts(text)
        found = recognizer.pattern.finditer(text) if starts is None else r._matches_at(recognizer.pattern, text, starts)
        assert [m.span() for m in found] == [m.span() for m in recognizer.pattern.finditer(text)], text


def test_iban_gate_never_hides_a_candidate() -> None:
    rng = random.Random(6)
    pieces = ["DE", "GB", "89", "\u0661\u0662", " ", "3704", "WEST", "AB", "0", "x", "\u00e9", "?"]
    candidates = 0
    for text in _texts(rng, pieces, 5000):
        if r._IBAN.search(text):
            candidates += 1
            assert r._may_hold_iban(text), text
    assert candidates > 100


def _reference_luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def test_luhn_and_card_checks_match_the_textbook_rule() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(12, 20)))
        assert v.luhn_ok(digits) == _reference_luhn(digits), digits
        separated = re.sub(r"(\d{4})(?=\d)", r"\1 ", digits)
        assert v.card_ok(separated) == v.card_ok(digits)
    assert v.card_ok("4111 1111 1111 1111") and not v.card_ok("4111 1111 1111 1112")
    assert not v.card_ok("4444444444444444")  # one repeated digit
