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

from ahocorasick_rs import AhoCorasick, Implementation

from evolvable.governance.redaction.findings import Finding

_CAP = r"[A-ZÀ-ÖØ-ÞĀ-ɏḀ-ỿΆ-ΏΑ-ΩЀ-Я][^\W\d_]*\.?"  # Latin, Greek and Cyrillic capitals
_NAME_WORD = (
    r"(?:(?:[dlDL]['’])?" + _CAP + r"|(?:de|del|la|le|les|du|des|das|dos|do|da|di|della|aux|au|los|las|van|von|der"
    r"|of|the|y))"
)  # `de la Mare aux Carats`, `de l'Epeule`
_NUMBER = r"\d{1,5}(?:[ ]?[A-Za-z](?![A-Za-z]))?"
# `<number> <Name words> Street`: read backwards from the street word
_FREE_BEFORE = r"(?:^|(?<=[\s,;:(\"'>])|(?<=\\[nrt]))"  # a space, punctuation, or a JSON escape (`\\n12 Elm St`)
_BEFORE_SUFFIX = re.compile(_FREE_BEFORE + _NUMBER + r",?[ ](?:" + _NAME_WORD + r"[ ]){0,3}" + _CAP + r"[ ]$")
_SUFFIX_WORDS = (
    "street", "st", "avenue", "ave", "road", "rd", "lane", "ln", "drive", "dr", "boulevard", "blvd", "way", "court",
    "ct", "place", "pl", "terrace", "close", "crescent", "parkway", "pkwy", "highway", "hwy", "square", "sq",
    "circle", "cir", "trail", "row", "walk", "crossing", "loop", "alley", "str",
)  # fmt: skip
# `<Name><glued suffix> <number>`: the suffix ends a capitalised word
_GLUED_WORDS = (
    "straße", "strasse", "str.", "weg", "allee", "gasse", "platz", "damm", "straat", "laan", "gracht", "plein",
    "dijk", "kade", "vej", "gade", "gatan", "vägen", "veien", "gata", "laan", "singel", "vei", "vegen", "vegur",
    "stígur", "braut", "gränd", "stræde", "katu", "tie", "kuja", "polku", "tänav", "iela",
)  # fmt: skip
# A glued street word may close a name of several words (`Johannes van Vlotenlaan 14`, `Brandenburgische Straße 9`)
_NAME_BEFORE_GLUED = re.compile(r"(?:" + _NAME_WORD + r"[ ]){1,3}$")
_GLUED_AFTER = re.compile(r"\.?,?[ ]" + _NUMBER + r"(?![\d.,]\d)")
# `rue <name>` preceded by a number (French), or `Calle <Name> <number>` (Spanish, Italian, Portuguese, Polish, ...)
_PREFIX_WORDS = (
    "rue", "avenue", "boulevard", "chemin", "allée", "impasse", "quai", "calle", "avenida", "av.", "carrer",
    "plaza", "paseo", "via", "viale", "piazza", "corso", "largo", "rua", "travessa", "praça", "ul.", "ulica",
    "ctra.", "carretera", "camino", "avda.", "alameda", "estrada", "rambla", "strada",
)  # fmt: skip
_PREFIX_NAME = re.compile(r"[ ](?:" + _NAME_WORD + r"[ ]){0,4}" + _CAP + r"(?=[,.\s\"'\\)]|$)")
_PREFIX_NUMBER_AFTER = re.compile(r",?[ ]" + _NUMBER + r"(?![\d.,]\d)")
_PREFIX_NUMBER_BEFORE = re.compile(_FREE_BEFORE + _NUMBER + r",?[ ]$")
# `<Name> utca <number>`: separate suffix words followed by the number (Hungarian, Turkish)
_LATE_WORDS = ("utca", "u.", "út", "tér", "sokak", "caddesi", "sokağı")
_LATE_BEFORE = re.compile(r"(?:" + _CAP + r"[ ]){1,3}$")
# A post-office box: `P.O. Box 44`, `PO Box 12`, `Postfach 1234`, `Apartado 77`, `Caixa Postal 5`
_BOX_WORDS = ("p.o. box", "po box", "p. o. box", "postfach", "apartado", "caixa postal", "casilla", "postboks")
_BOX_NUMBER = re.compile(r"[ ]\d{1,6}(?![\d.,]\d)(?![^\W_])")
# Words that announce an address: then the first `<Name words> <number>` close after them is one, street word or
# not (`it is Laugarvegur 77`, `located at Καστελλόκαμπος 193`, `Address:\n Hugo Reta 6961`).
_CONTEXT_WORDS = (
    "address", "adresse", "dirección", "direccion", "endereço", "indirizzo", "adres", "anschrift",
    "live at", "lives at", "lived at", "living at", "live in", "lives in", "lived in", "living in", "located at",
    "moved to", "move to", "ship to", "shipped to", "send it to", "send them to", "sent to", "deliver to",
    "delivered to", "delivery to", "office is at", "meet you at", "meet me at", "taxi to", "arrived at", "visit us at",
    "return to", "return it to", "mail it to",
)  # fmt: skip
_CONTEXT_REACH = 64
_GAP = re.compile(r"(?:[\s:,?.>\-]|\\[nrt])*")
# capitalised words, particles and abbreviations, then maybe one lower-case street word (`Vidkuns gate 71`, `Luite
# tee 87`) that is no preposition or verb of a sentence (`Berlin in 2019`, `Berlin since 2019`), then the number
_NOT_STREET = (
    r"(?:since|until|from|after|before|and|for|the|was|were|are|with|than|has|had|about|around|in|on|at|by|to|of|is)"
)
_CONTEXT_ADDRESS = re.compile(
    r"(?:(?<![^\W_])|(?<=\\[nrt]))(?:" + _CAP + r"|[a-z]{1,3}\.)(?:-[^\W\d_]+)*"
    r"(?:[ ](?:" + _NAME_WORD + r"|[^\W\d_]{1,4}\.)(?:-[^\W\d_]+)*){0,4}"
    r"(?:[ ](?!" + _NOT_STREET + r"[ ])[a-zà-ÿ][^\W\d_]{2,})?"
    r",?[ ]\d{1,5}[A-Za-z]?(?![\d.,:/]\d)(?![^\W_])(?!%)"
)

# Street words stand alone (a space before them), glued suffixes end a word; `avenue` reads both ways (`12 avenue
# Foch`, `12 Elm Avenue`) and is tried as a suffix too.
_KINDS = {" " + w: "suffix" for w in _SUFFIX_WORDS} | {" " + w: "late" for w in _LATE_WORDS}
_KINDS |= {lead + w: "prefix" for w in _PREFIX_WORDS for lead in (" ", '"', "'", "(", ">", "\n", "\\n")}
_KINDS |= {w: "glued" for w in _GLUED_WORDS} | {w: "box" for w in _BOX_WORDS} | {w: "context" for w in _CONTEXT_WORDS}
# characters before the street word in each searched key: a space, a quote, or a JSON escape (`\\n`)
_LEAD = {w: 0 if kind in ("glued", "box", "context") else 2 if w.startswith("\\n") else 1 for w, kind in _KINDS.items()}
# a DFA: with ~340 words the crate picks a contiguous NFA, which searched 1.7x slower here (benchmarks/redaction.py)
_SEARCH = AhoCorasick(sorted(_KINDS), implementation=Implementation.DFA).find_matches_as_indexes
_DIGIT = re.compile(r"\d")
_WORDS = sorted(_KINDS)
# per automaton index: (word, kind, lead, whether a letter or digit right after the hit rules it out). `_read`
# drops a standalone street word glued to what follows (`Streets`, `please`, `statement`: most hits) unless it
# ends in a dot; an `avenue` hit is then still tried as a suffix, so it is not dropped here.
_HITS = tuple(
    (w, kind, _LEAD[w], kind in ("suffix", "late", "prefix") and not w.endswith((".", "avenue")))
    for w, kind in ((w, _KINDS[w]) for w in _WORDS)
)
_LETTER_AFTER = re.compile(r"[^\W_]")
_GLUED_NEXT = frozenset(" .,")  # what `_GLUED_AFTER` can start with


class AddressRecognizer:
    kind = "ADDRESS"
    priority = 40
    # No engine-level keywords: street words such as `st` and `way` occur in most texts, and the engine's keyword
    # pass would list every occurrence; the recognizer's own search wants them preceded by a space.
    requires_digit = True  # every address has a house number: the engine skips texts without a digit

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        if _DIGIT.search(text) is None:
            return []  # a C-level scan, cheaper than the street-word search
        return self.find_prefiltered(text, lowered)

    def find_prefiltered(self, text: str, lowered: str) -> list[Finding]:
        """`find` for a caller that already checked the text holds a digit (the engine's pre-filter)."""
        if len(lowered) != len(text):
            lowered = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
        try:
            hits = _SEARCH(lowered, overlapping=True)
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form
            return []
        if not hits:
            return []
        out: list[Finding] = []
        for index, start, end in hits:
            word, kind, lead, standalone = _HITS[index]
            if standalone and text[end : end + 1].isalnum():
                continue  # `_read` would drop it: `_LETTER_AFTER` (`[^\W_]`) is `str.isalnum` for one character
            start += lead
            if kind == "context":  # below the street-word forms, which know better where an address starts
                if (span := _in_context(text, start, end)) is not None:
                    out.append(Finding(span[0], span[1], self.kind, self.priority - 1))
                continue
            after = text[end : end + 1]
            if kind == "glued" and after not in _GLUED_NEXT:
                continue  # the commonest hit: a street word inside another word (`entities`, `survey`)
            span = _read(text, word, kind, start, end)
            if span is None and word.endswith("avenue"):
                span = _suffix(text, start, end)
            if span is not None:
                out.append(Finding(span[0], span[1], self.kind, self.priority))
        if out:  # an address found once is one wherever else it is written in the text
            for value, priority in {text[f.start : f.end]: f.priority for f in out}.items():
                if text.count(value) < 2:
                    continue
                i = text.find(value)
                while i != -1:
                    out.append(Finding(i, i + len(value), self.kind, priority))
                    i = text.find(value, i + len(value))
        return out


def _in_context(text: str, start: int, end: int) -> tuple[int, int] | None:
    if start and text[start - 1].isalpha() and not _after_escape(text, start):
        return None  # inside a word (`ipaddress`)
    # the address follows on the same line, or begins the next one (`Address:\\n Hugo Reta 6961`)
    first = _GAP.match(text, end).end()  # type: ignore[union-attr]  # matches the empty string at least
    stop = min(end + _CONTEXT_REACH, len(text))
    for line_end in (text.find("\n", first, stop), text.find("\\n", first, stop)):
        if line_end != -1:
            stop = min(stop, line_end)
    m = _CONTEXT_ADDRESS.search(text, end, stop)
    return m.span() if m is not None else None


def _box(text: str, start: int, end: int) -> tuple[int, int] | None:
    if start and text[start - 1].isalpha() and not _after_escape(text, start):
        return None
    m = _BOX_NUMBER.match(text, end)
    return (start, m.end()) if m is not None else None


def _read(text: str, word: str, kind: str, start: int, end: int) -> tuple[int, int] | None:
    if kind == "glued":
        return _glued(text, start, end)
    if kind == "box":
        return _box(text, start, end)
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
        if _after_escape(text, word_start):
            break
        word_start -= 1
    if not text[word_start].isupper():
        return None
    m = _GLUED_AFTER.match(text, end)
    if m is None:
        return None
    before = _NAME_BEFORE_GLUED.search(text, max(0, word_start - 60), word_start)
    return (before.start() if before is not None else word_start), m.end()


def _late(text: str, start: int, end: int) -> tuple[int, int] | None:
    m = _LATE_BEFORE.search(text, max(0, start - 40), start)
    after = _PREFIX_NUMBER_AFTER.match(text, end)
    return (m.start(), after.end()) if m is not None and after is not None else None


def _after_escape(text: str, i: int) -> bool:
    """`text[i]` starts right after a JSON escape (`\\nRua ...`)."""
    return i >= 2 and text[i - 2] == "\\" and text[i - 1] in "nrt"


def _prefix(text: str, start: int, end: int) -> tuple[int, int] | None:
    if start and text[start - 1].isalpha() and not _after_escape(text, start):
        return None
    name = _PREFIX_NAME.match(text, end)
    if name is None:
        return None
    if (after := _PREFIX_NUMBER_AFTER.match(text, name.end())) is not None:
        return start, after.end()
    before = _PREFIX_NUMBER_BEFORE.search(text, max(0, start - 12), start)
    return (before.start(), name.end()) if before is not None else None


__all__ = ["AddressRecognizer"]
