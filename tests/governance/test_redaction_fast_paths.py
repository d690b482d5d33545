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
from evolvable.governance.redaction.engine import resolve_overlaps
from evolvable.governance.redaction.findings import Finding


def _texts(rng: random.Random, pieces: list[str], count: int, most: int = 20) -> list[str]:
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, most))) for _ in range(count)]


def test_number_runs_are_the_regex_runs() -> None:
    rng = random.Random(1)
    pieces = [
        *"0123456789", *" .()+-", "x", "\n", "_", "/", "\u0663", "\u00e9", "\u2019", "\uff11", "\U0001d7d9", "4111",
        "  ", "...",
    ]  # fmt: skip
    for text in _texts(rng, pieces, 6000, most=40):
        assert r.number_runs(text) == [m.span() for m in r._NUMBER_RUN.finditer(text)], text


def test_a_byte_form_exactly_where_every_digit_is_ascii() -> None:
    """The number recognizer's fast paths read `\\d` as `[0-9]`: only text whose decimal digits are all ASCII gets
    a byte form (accents, curly quotes, dashes do; `٣` or a full-width `１` do not), one byte per character."""
    rng = random.Random(31)
    pieces = [
        "7", "a", "?", "\u00e9", "\u2019", "\u2013", "\u0663", "\uff11", "\u0967", "\U0001d7d9", "\u00b2", "\ud800",
    ]  # fmt: skip
    for text in _texts(rng, pieces, 4000, most=8):
        data = r.byte_per_character(text)
        assert (data is not None) is all(c in "0123456789" for c in text if c.isdecimal()), text
        if data is not None:
            assert len(data) == len(text)
            assert all(data[i] == ord(c) for i, c in enumerate(text) if c.isascii()), text


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
    texts += ["".join(rng.choice(alphabets[0][:9]) for _ in range(n)) for n in (1023, 1024, 1100)]  # past the table
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


def test_iban_starts_give_exactly_the_matches_of_a_full_scan() -> None:
    """Overlapping starts too (`DE89DE89 3704 ...`), digits outside ASCII (`\\d` matches them), other scripts."""
    rng = random.Random(6)
    pieces = ["DE", "GB", "89", "\u0661\u0662", " ", "3704", "WEST", "AB", "0", "x", "\u00e9", "?", "\U0001f600"]
    candidates = 0
    for text in _texts(rng, pieces, 5000):
        full = [m.span() for m in r._IBAN.finditer(text)]
        candidates += bool(full)
        assert [m.span() for m in r._matches_at(r._IBAN, text, r._iban_starts(text))] == full, text
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


def test_digits_of_keeps_what_isdigit_accepts() -> None:
    rng = random.Random(8)
    for text in _texts(rng, [*"0123456789", *" .()+-", "x", "\u0663", "\u00b2", "\u00e9", "\U0001d7d8"], 4000):
        assert v.digits_of(text) == "".join(filter(str.isdigit, text)), text


def test_card_digits_and_ipv4_octets_agree_with_the_general_checks() -> None:
    rng = random.Random(9)
    for _ in range(4000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 21)))
        digits = rng.choice(["4", "5", "34", "37", "6011", "62", "2221", ""]) + digits
        assert v.card_digits_ok(digits) == v.card_ok(digits), digits
    octets = ["0", "00", "01", "9", "10", "199", "249", "255", "256", "999"]
    for _ in range(3000):
        text = ".".join(rng.choice(octets) for _ in range(4))
        m = v.IPV4_OCTETS.fullmatch(text)
        reference = _reference_ip(text)
        assert (None if m is None else v.ipv4_octets_value(m)) == (None if reference is None else reference[1]), text
        assert v.ipv4_value(text) == (None if reference is None else reference[1]), text


def test_hint_starts_are_every_hint_word_position() -> None:
    rng = random.Random(10)
    pieces = [*r._HINT_WORDS, "pwd", "passecret", "tokey", "a", " ", "_", "\u00e9", "\U0001f600", "\ud800", "\u0130"]
    for text in _texts(rng, pieces, 4000):
        expected = sorted(i for word in r._HINT_WORDS for i in range(len(text)) if text.startswith(word, i))
        assert r._hint_starts(text) == expected, text
        assert r._hint_starts_slow(text) == expected, text


def _reference_number_find(self: r.NumberRecognizer, text: str, lowered: str) -> list[r.Finding]:
    """`NumberRecognizer.find` as it was before the digit count came from the separator shape and an IPv4 run
    was parsed by one octet regex (kept here to compare against)."""
    out: list[r.Finding] = []
    n = len(text)
    ascii_text = text.isascii()
    for run_start, run_end in r.number_runs(text):
        run = text[run_start:run_end]
        size = run_end - run_start
        plus = "+" in run
        dots = run.count(".")
        digits = size if run.isdigit() else -1
        if not plus and dots < 3:
            if size < 10:
                continue
            if digits < 0:
                digits = len("".join(filter(str.isdigit, run)))
            if digits < 9:
                continue
        elif digits < 0:
            digits = len("".join(filter(str.isdigit, run)))
        end = run_end + 2 if run_end + 2 < n else n
        dashes = run.count("-")
        if plus:
            self.intl_phone.scan(text, lowered, run_start, end, out)
        shape = None
        if digits >= 9 and digits != size and ascii_text and self._shape_shortcuts:
            shape = run.encode("ascii").translate(r._DIGITS_SEPARATORS)
        if digits >= 10:
            if digits != size and (shape is None or b"000-0000" in shape):
                self.us_phone.scan(text, lowered, run_start, end, out)
            if digits <= 16 and (digits == size or run[1:].isdigit()):
                self._bare_phone(text, lowered, run_start, run_end, out)
            if digits >= 13:
                if digits == size <= 19 and ascii_text and self._card_shortcut and r._free_right(text, run_end, end):
                    if r.free_left(text, run_start) and v.card_ok(run):
                        out.append(r.Finding(run_start, run_end, self.card.kind, self.card.priority))
                else:
                    self.card.scan(text, lowered, run_start, end, out)
        if digits >= 9 and dashes >= 2 and (shape is None or b"000-00-0000" in shape):
            self.ssn.scan(text, lowered, run_start, end, out)
        if dots >= 3:
            if dots == 3 and ascii_text and self._ipv4_shortcut and r._DOTTED_QUAD.fullmatch(run):
                value = _reference_ip(run)
                if value is not None and v.public_ipv4_value(value[1]) and r._not_a_version(text, run_start):
                    out.append(r.Finding(run_start, run_end, self.ipv4.kind, self.ipv4.priority))
            else:
                self.ipv4.scan(text, lowered, run_start, end, out)
    return out


def test_number_recognizer_finds_what_its_previous_loop_found() -> None:
    numbers = next(x for x in r.pii_recognizers() if isinstance(x, r.NumberRecognizer))
    numbers.national = None  # the national-format phone checker came later; test_redaction_phones.py covers it
    rng = random.Random(13)
    pieces = [
        *"0123456789", *" .()+-", "x", "_", "/", "\n", "\u0663", "\u00e9", "\u2019", "\uff11", "call ", "phone: ", "v",
        "version ",
        "4111111111111111", "4111 1111 1111 1111", "3782-822463-10005", "(415) 555-0123", "1-800-555-0199",
        "+44 20 7946 0958", "4155550123", "123-45-6789", "34.201.12.9", "192.168.1.1", "1.2.3.4.5", "256.1.1.1",
        "01.2.3.4", "2026-01-11", "978-4-24-324692-0", "415.555.0123", "415 555 0123", "(415)555-0123",
        "1 (415) 555-0123", "(415)-555-0123", "4155-555-0123", "(41) 555-0123", "555-0123",
    ]  # fmt: skip
    found = 0
    for text in _texts(rng, pieces, 6000, most=16):
        lowered = text.lower()
        expected = _reference_number_find(numbers, text, lowered)
        assert numbers.find(text, lowered) == expected, text
        found += len(expected)
    assert found > 1000


def test_phone_validity_matches_libphonenumber() -> None:
    import phonenumbers

    from evolvable.governance.redaction import phones

    rng = random.Random(5)
    regions = {region.code: region for region in phones._REGIONS}
    for numbers in phones._BY_COUNTRY_CODE.values():
        regions.update((region.code, region) for region in numbers)
    valid = 0
    for region in regions.values():
        candidates = set()
        for number_type in range(12):
            example = phonenumbers.example_number_for_type(region.code, number_type)
            if example is not None:
                candidates.add(phonenumbers.national_significant_number(example))
        for length in region.lengths:
            candidates |= {"".join(rng.choices(string.digits, k=length)) for _ in range(20)}
        for nsn in {c[:i] + d + c[i + 1 :] for c in candidates for i in range(len(c)) for d in "05"} | candidates:
            if not nsn.strip("0"):
                continue  # all zeros: `_valid_in` asks libphonenumber itself
            number = phones._number(region.country_code, nsn)
            expected = phonenumbers.is_valid_number_for_region(number, region.code)
            assert phones.valid_for_region(region, nsn) == expected, (region.code, nsn)
            valid += expected
    assert valid > 1000  # the examples and their neighbours: many valid numbers, not only rejections


def _reference_resolve(findings: list[Finding]) -> list[Finding]:
    """Greedy by priority then length, quadratic, as the engine's overlap rule reads."""
    kept: list[Finding] = []
    for f in sorted(findings, key=lambda f: (-f.priority, f.start - f.end, f.start)):
        if all(k.end <= f.start or k.start >= f.end for k in kept) and not any(k.start == f.start for k in kept):
            kept.append(f)
    return sorted(kept, key=lambda f: f.start)


def test_overlap_resolution_keeps_what_the_greedy_rule_keeps() -> None:
    rng = random.Random(9)
    for _ in range(20000):
        findings = []
        for _ in range(rng.randint(2, 6)):
            start = rng.randint(0, 40)
            findings.append(Finding(start, start + rng.randint(1, 8), rng.choice("AB"), rng.choice((10, 50, 60))))
        assert resolve_overlaps(list(findings)) == _reference_resolve(findings), findings


def test_date_runs_skipped_unchecked_would_have_found_nothing() -> None:
    """The number recognizer skips `_DATE_RUN` runs without trying its patterns or the national checker."""
    numbers = next(x for x in r.pii_recognizers() if isinstance(x, r.NumberRecognizer))
    reference = next(x for x in r.pii_recognizers() if isinstance(x, r.NumberRecognizer))
    reference._skip_dates = False
    assert numbers._skip_dates
    rng = random.Random(17)
    pieces = [
        *"0123456789", *" .()+-/", "x", "_", "\n", "\u0663", "\u00e9", "call ", "phone: ", "tel ", "ssn ",
        "2019-01-19", "2019-01-19 05", "19/01/2019", "19.01.2019 23", "2026/11/25", "2019-01-19T05", "20", "19",
        "-01", "/12", ".31", " 05", "+1 ", "(415) ", "555-0123", "123-45-", "0123", "00", "version ",
    ]  # fmt: skip
    skipped = 0
    for text in _texts(rng, pieces, 8000, most=14):
        lowered = text.lower()
        assert numbers.find(text, lowered) == reference.find(text, lowered), text
        skipped += sum(r._DATE_RUN.fullmatch(text[a:b]) is not None for a, b in r.number_runs(text))
    assert skipped > 1000


def test_address_hits_glued_to_a_word_are_dropped_as_read_would_drop_them() -> None:
    """Street-word hits followed by a letter or digit are dropped before `_read`; with the drop turned off for
    every word the findings are the same."""
    from evolvable.governance.redaction import addresses as a

    recognizer = a.AddressRecognizer()
    rng = random.Random(19)
    pieces = [
        "12 ", "Elm ", "Maple ", "Street", "Streets", " street", "St", "St.", "Ave", "avenue", "Avenue ", "avenues",
        "rue ", "ruelle", "Calle ", "Mayor ", "5", "Hauptstraße ", "Pl", "please", " ", ", ", "\n", "\\n", "Rd",
        "roadmap", "road", "via", "Via ", "viaduct", "utca ", "u.", "Síp ", "lives at ", "7", "x", "é", "street9",
    ]  # fmt: skip
    texts = _texts(rng, pieces, 6000, most=12)
    fast = [recognizer.find(t, t.lower()) for t in texts]
    hits = a._HITS
    try:
        a._HITS = tuple((word, kind, lead, False) for word, kind, lead, _ in hits)
        assert [recognizer.find(t, t.lower()) for t in texts] == fast
    finally:
        a._HITS = hits
    assert sum(map(len, fast)) > 100
    dropped = sum(
        standalone and t[end : end + 1].isalnum()
        for t in texts
        for index, _, end in a._SEARCH(t.lower(), overlapping=True)
        for _, _, _, standalone in [hits[index]]
    )
    assert dropped > 1000


class _ScanEveryMention:
    """`NameRecognizer._mentions` before the counts ruled most calls out: always scans every capitalised word."""

    @staticmethod
    def mentions(self: object, text: str, out: list[Finding]) -> list[Finding]:
        from evolvable.governance.redaction import names as n

        code_of = self._code  # type: ignore[attr-defined]
        words = {
            word.removesuffix("'s").removesuffix("’s")
            for f in out
            for word in n._WORD.findall(text, f.start, f.end)
            if code_of(word) >= 2
        }
        found = [(f.start, f.end) for f in out]
        more: list[Finding] = []
        for m in n._WORD.finditer(text):
            start, end = m.span()
            if text[end - 2 : end] in n._POSSESSIVE:
                end -= 2
            if text[start:end] in words and not any(a <= start < b for a, b in found):
                more.append(Finding(start, end, "PERSON", 10))
        return out + more if more else out


def test_later_mentions_of_a_name_are_what_a_full_scan_finds() -> None:
    """`_mentions` with its count shortcut against the full scan, on the names `find` found and on subsets of
    them (a name left out is found again by the scan), without patching the recognizer (a compiled one cannot
    be patched: scripts/build_native_redaction.sh)."""
    from evolvable.governance.redaction.names import NameRecognizer

    pieces = [
        "Maria ", "Lopez", "Lopez's ", "Lopez’s ", "Priya ", "Priya", "Mineko ", "Eriksson", "Felicia ", "van ",
        "Dijk ", "Mark ", "Rose", "Okafor-Eze ", "Li ", "Lily ", "said ", "Mr. ", "Hi ", ", ", ". ", "\n", "the ",
        "Bank ", "New ", "York ", "Zsigmond ", "talked to ", "x", "MariaLopez ", "Anna-Anna-Anna ", "Anna ",
    ]  # fmt: skip
    rng = random.Random(23)
    recognizer = NameRecognizer()
    scanned = found_again = 0
    for text in _texts(rng, pieces, 6000, most=14):
        names = list(recognizer.find(text, text.lower()))
        for out in (names, names[:1], names[1:], names[::2]):
            expected = _ScanEveryMention.mentions(recognizer, text, list(out))
            assert recognizer._mentions(text, list(out)) == expected, (text, out)
            scanned += bool(out)
            found_again += len(expected) > len(out)
    assert scanned > 10000
    assert found_again > 1000


def test_ending_look_ups_answer_what_endswith_answers() -> None:
    """`_ends_with_any` (two dict look-ups) against `str.endswith` with the whole tuple, for the title and phrase
    tables `context_before` uses, on texts ending in each word, in parts of words, and in random characters."""
    from evolvable.governance.redaction import names

    rng = random.Random(29)
    for words, table in ((names._TITLES, names._TITLES_BY_END), (names._PHRASES, names._PHRASES_BY_END)):
        endings = [w[i:] for w in words for i in range(len(w))] + [w[:-1] for w in words] + ["", "x", " "]
        texts = [prefix + e for e in endings for prefix in ("", " ", "a", "xy", "talked ")]
        texts += ["".join(rng.choices("ahimrst .,'?", k=rng.randint(0, 8))) for _ in range(20000)]
        for text in texts:
            assert names._ends_with_any(text, table) == text.endswith(words), (text, words)
