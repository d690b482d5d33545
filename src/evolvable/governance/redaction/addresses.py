"""Street addresses: the street and house number (`1353 Maple Street`, `Hauptstraße 12`, `12 rue de la Paix`,
`Calle Mayor 5`, `Via Roma 10`, `Kerkstraat 12`, `ul. Białołęcka 48`).

A street-type word is found first (one Aho-Corasick pass over the lower-cased text), then an anchored regex reads
the house number and street name around it, in the word order that street type takes: `<number> <Name> Street`,
`<Name>straße <number>`, `<number> rue <name>`, `Calle <Name> <number>`, `<Name> utca <number>`. A street word
without a house number (`Wall Street`, `the main road`) is no address. City and postcode are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ahocorasick_rs import AhoCorasick

from evolvable.governance.redaction.recognizers import Finding

_CAP = r"[A-ZÀ-ÖØ-ÞĀ-ɏḀ-ỿ][^\W\d_]*\.?"
_NAME_WORD = r"(?:" + _CAP + r"|(?:de|del|la|le|du|des|das|dos|da|di|della|van|von|der|of|the))"
_NUMBER = r"\d{1,5}(?:[ ]?[A-Za-z](?![A-Za-z]))?"
# `<number> <Name words> Street`: read backwards from the street word
_BEFORE_SUFFIX = re.compile(
    r"(?:^|(?<=[\s,;:(\"'>]))" + _NUMBER + r",?[ ](?:" + _NAME_WORD + r"[ ]){0,3}" + _CAP + r"[ ]$"
)
_SUFFIX_WORDS = (
    "street", "st", "avenue", "ave", "road", "rd", "lane", "ln", "drive", "dr", "boulevard", "blvd", "way", "court",
    "ct", "place", "pl", "terrace", "close", "crescent", "parkway", "pkwy", "highway", "hwy", "square", "sq",
)  # fmt: skip
# `<Name><glued suffix> <number>`: the suffix ends a capitalised word
_GLUED_WORDS = (
    "straße", "strasse", "str.", "weg", "allee", "gasse", "platz", "damm", "straat", "laan", "gracht", "plein",
    "dijk", "kade", "vej", "gade", "gatan", "vägen", "veien", "gata",
)  # fmt: skip
_GLUED_AFTER = re.compile(r"\.?,?[ ]" + _NUMBER + r"(?![\d.,]\d)")
# `rue <name>` preceded by a number (French), or `Calle <Name> <number>` (Spanish, Italian, Portuguese, Polish, ...)
_PREFIX_WORDS = (
    "rue", "avenue", "boulevard", "chemin", "allée", "impasse", "quai", "calle", "avenida", "av.", "carrer",
    "plaza", "paseo", "via", "viale", "piazza", "corso", "largo", "rua", "travessa", "praça", "ul.", "ulica",
)  # fmt: skip
_PREFIX_NAME = re.compile(r"[ ](?:" + _NAME_WORD + r"[ ]){0,3}" + _CAP + r"(?=[,.\s\"'\\)]|$)")
_PREFIX_NUMBER_AFTER = re.compile(r",?[ ]" + _NUMBER + r"(?![\d.,]\d)")
_PREFIX_NUMBER_BEFORE = re.compile(r"(?:^|(?<=[\s,;:(\"'>]))" + _NUMBER + r",?[ ]$")
# `<Name> utca <number>`: separate suffix words followed by the number (Hungarian, Turkish)
_LATE_WORDS = ("utca", "út", "tér", "sokak", "caddesi", "sokağı")
_LATE_BEFORE = re.compile(_CAP + r"[ ]$")

# Street words stand alone (a space before them), glued suffixes end a word; `avenue` reads both ways (`12 avenue
# Foch`, `12 Elm Avenue`) and is tried as a suffix too.
_KINDS = {" " + w: "suffix" for w in _SUFFIX_WORDS} | {" " + w: "late" for w in _LATE_WORDS}
_KINDS |= {lead + w: "prefix" for w in _PREFIX_WORDS for lead in " \"'(>\n"} | {w: "glued" for w in _GLUED_WORDS}
_SEARCH = AhoCorasick(sorted(_KINDS)).find_matches_as_indexes
_DIGIT = re.compile(r"\d")
_WORDS = sorted(_KINDS)
_LETTER_AFTER = re.compile(r"[^\W_]")


class AddressRecognizer:
    kind = "ADDRESS"
    priority = 40
    # No engine-level keywords: street words such as `st` and `way` occur in most texts, and the engine's keyword
    # pass would list every occurrence; the recognizer's own search wants them preceded by a space.

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        if len(lowered) != len(text):
            lowered = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
        try:
            hits = _SEARCH(lowered, overlapping=True)
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form
            return []
        if not hits or _DIGIT.search(text) is None:
            return []  # every address has a house number
        out: list[Finding] = []
        for index, start, end in hits:
            word = _WORDS[index]
            kind = _KINDS[word]
            if kind != "glued":
                start += 1  # the leading space (or quote)
            span = _read(text, word, kind, start, end)
            if span is None and word.endswith("avenue"):
                span = _suffix(text, start, end)
            if span is not None:
                out.append(Finding(span[0], span[1], self.kind, self.priority))
        return out


def _read(text: str, word: str, kind: str, start: int, end: int) -> tuple[int, int] | None:
    if kind == "glued":
        return _glued(text, start, end)
    if end < len(text) and _LETTER_AFTER.match(text, end) and not word.endswith("."):
        return None  # inside a longer word (`Streets`, `roadmap`)
    if kind == "suffix":
        return _suffix(text, start, end)
    if kind == "late":
        return _late(text, start, end)
    return _prefix(text, start, end)


def _suffix(text: str, start: int, end: int) -> tuple[int, int] | None:
    if (start and text[start - 1].isalpha()) or not text[start].isupper():
        return None
    m = _BEFORE_SUFFIX.search(text, max(0, start - 80), start)
    if m is None:
        return None
    return m.start(), end + (1 if end < len(text) and text[end] == "." else 0)


def _glued(text: str, start: int, end: int) -> tuple[int, int] | None:
    word_start = start
    while word_start and (text[word_start - 1].isalpha() or text[word_start - 1] in "-"):
        word_start -= 1
    if not text[word_start].isupper():
        return None
    m = _GLUED_AFTER.match(text, end)
    return (word_start, m.end()) if m is not None else None


def _late(text: str, start: int, end: int) -> tuple[int, int] | None:
    m = _LATE_BEFORE.search(text, max(0, start - 40), start)
    after = _PREFIX_NUMBER_AFTER.match(text, end)
    return (m.start(), after.end()) if m is not None and after is not None else None


def _prefix(text: str, start: int, end: int) -> tuple[int, int] | None:
    if start and text[start - 1].isalpha():
        return None
    name = _PREFIX_NAME.match(text, end)
    if name is None:
        return None
    if (after := _PREFIX_NUMBER_AFTER.match(text, name.end())) is not None:
        return start, after.end()
    before = _PREFIX_NUMBER_BEFORE.search(text, max(0, start - 12), start)
    return (before.start(), name.end()) if before is not None else None


__all__ = ["AddressRecognizer"]
