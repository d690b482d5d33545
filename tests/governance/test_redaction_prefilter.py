"""The engine's shortcuts must not change what it finds: the Aho-Corasick keyword pre-filter selects exactly the
recognizers the per-keyword substring tests selected, and the engine finds (and redacts) the same as an engine
that runs every recognizer's own `find` (each checking its own keywords) on every text.

Texts come from the labeled corpus, from random slices of it glued together, and from random fragments chosen to
hit keyword, case, Unicode (length-changing lowercase, astral characters, lone surrogates) and boundary cases.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

import pytest

from evolvable.governance.redaction import RedactionEngine, default_recognizers
from evolvable.governance.redaction import engine as engine_module
from evolvable.governance.redaction import recognizers as r
from evolvable.governance.redaction.evaluation import load_corpus

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "redaction_corpus.jsonl"

_FRAGMENTS = [
    " ", "\n", "\\n", '"', "'", ": ", "=", "-", "_", ".", "@", "://", "x", "A", "a", "0", "9",
    "bob@example.com", "postgres://app:s3cr3tPw@db.internal:5432/x", "AKIA", "akia", "AKIAIOSFODNN7EXAMPLE",
    "ASIA", "A3T", "AIza", "aiza", "AIzaSyD-1234567890abcdefghijklmnopqrstu", "ya29.", "YA29.", "eyJ", "EYJ",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abc", "PRIVATE KEY", "private key", "Private Key",
    "-----BEGIN RSA PRIVATE KEY-----", "sk-", "SK-", "sk-ant-", "sk-proj-abcDEF1234567890ghijKLMN", "ghp_",
    "GHP_", "gho_", "github_pat_", "GITHUB_PAT_", "ghp_0123456789abcdefghijABCDEFGHIJ012345", "xox", "XOX",
    "xoxb-1234567890-abcdef", "xapp-", "hooks.slack.com", "HOOKS.SLACK.COM", "_live_", "_LIVE_", "sk_live_",
    "rk_test_abcdefghij0123", "_prod_", "whsec_", "WHSEC_", "password", "PASSWORD", "Passwd", "pwd", "PW", "pass",
    "secret", "SECRET", "token", "Token", "credential", "key", "KEY", "auth", "aws", "AWS", "basic", "Bearer ",
    "bearer abcdefghijklmnop0123", "ssn", "SSN ", "ss#", "social security", "Social Security", "passecret",
    "api_key", "max_tokens", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "4111 1111 1111 1111", "4111111111111111",
    "(415) 555-0123", "+44 20 7946 0958", "123-45-6789", "34.201.12.9", "10.0.0.1", "2001:4860:4860::8888",
    "DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "call ", "phone: ", "version ",
    "\u00e9", "\u0130", "\u0130\u0130", "\u03a3", "\u212a", "\U0001f600", "\u0663", "\ud800", "\u00df",
]  # fmt: skip


def _random_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    corpus = [rec["text"] for rec in load_corpus(CORPUS)]
    texts = []
    for i in range(count):
        if i % 2:
            texts.append("".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(0, 24))))
        else:  # slices of corpus texts glued together, now and then with a fragment between them
            parts = []
            for _ in range(rng.randint(1, 4)):
                text = rng.choice(corpus)
                start = rng.randint(0, len(text))
                parts.append(text[start : start + rng.randint(0, 120)])
                if rng.random() < 0.5:
                    parts.append(rng.choice(_FRAGMENTS))
            texts.append("".join(parts))
    return texts


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [rec["text"] for rec in load_corpus(CORPUS)] + _random_texts(6000, seed=11)


def _reference_bits(recognizers: list[r.Recognizer], text: str, lowered: str) -> int:
    """The hit bits as one substring test per keyword (the pre-filter's definition)."""
    n = len(recognizers)
    bits = 0
    for i, recognizer in enumerate(recognizers):
        for k in getattr(recognizer, "exact_keywords", ()):
            if k in text:
                bits |= 1 << i
        for k in getattr(recognizer, "keywords", ()):
            if k in lowered:
                bits |= 1 << (n + i)
    return bits


def test_keyword_search_hits_exactly_the_keywords_that_occur(texts: list[str]) -> None:
    engine = RedactionEngine()
    search = engine._plan.keywords
    surrogates = 0
    for text in texts:
        lowered = text.lower()
        expected = _reference_bits(engine.recognizers, text, lowered)
        assert search.bits(text, lowered) == expected, text
        assert search.slow_bits(text, lowered) == expected, text
        surrogates += "\ud800" in text
    assert surrogates > 50  # the UTF-8 fallback was exercised


def test_keyword_plan_handles_shared_and_cased_keywords() -> None:
    """Keywords shared by recognizers, a case-sensitive keyword equal to a lower-case one, upper-case letters in a
    lower-case keyword list (never matches the lowered text, as before) and no keywords at all."""

    class Probe:
        kind = "PROBE"

        def __init__(self, keywords: tuple[str, ...] = (), exact_keywords: tuple[str, ...] = ()) -> None:
            self.keywords, self.exact_keywords = keywords, exact_keywords

        def find(self, text: str, lowered: str) -> Iterable[r.Finding]:
            return ()

    recognizers: list[r.Recognizer] = [
        Probe(keywords=("key", "Key")),
        Probe(exact_keywords=("key", "KEY")),
        Probe(keywords=("key",), exact_keywords=("Key",)),
        Probe(),
        Probe(keywords=("\u00e9", "i\u0307")),
    ]
    # a non-ASCII case-sensitive keyword: `Σ` lowers to `ς` at the end of a word, so it gets substring tests
    sigma: list[r.Recognizer] = [Probe(exact_keywords=("\u03a3", "K")), Probe(keywords=("k",))]
    for text in ["\u0391\u03a3", "\u03a3\u0391", "K\u03a3", "k", "\ud800\u03a3"]:
        expected = _reference_bits(sigma, text, text.lower())
        assert engine_module._KeywordPlan(sigma).keywords.bits(text, text.lower()) == expected, text
    plan = engine_module._KeywordPlan(recognizers)
    rng = random.Random(12)
    chars = ["k", "K", "e", "E", "y", "Y", " ", "\u0130", "\u00e9", "\u00c9", "\ud800"]
    for _ in range(3000):
        text = "".join(rng.choice(chars) for _ in range(8))
        lowered = text.lower()
        expected = _reference_bits(recognizers, text, lowered)
        assert plan.keywords.bits(text, lowered) == expected, text
        n = len(recognizers)
        runs = [runner[0] for runner in plan.runners(text, lowered)]
        wanted = []
        for i, recognizer in enumerate(recognizers):
            need_exact = bool(recognizer.exact_keywords)  # type: ignore[attr-defined]
            need_lower = bool(recognizer.keywords)  # type: ignore[attr-defined]
            if (not need_exact or expected >> i & 1) and (not need_lower or expected >> (n + i) & 1):
                wanted.append(recognizer)
        assert runs == wanted, text


class _UnfilteredEngine(RedactionEngine):
    """Runs every recognizer's own `find` on every text: no engine pre-filter."""

    def find(self, text: str) -> list[r.Finding]:
        if not text:
            return []
        lowered = text.lower()
        found: list[r.Finding] = []
        for recognizer in self.recognizers:
            found.extend(recognizer.find(text, lowered))
        return engine_module.resolve_overlaps(found) if len(found) > 1 else found


def test_engine_finds_what_every_recognizer_alone_finds(texts: list[str]) -> None:
    engine, unfiltered = RedactionEngine(), _UnfilteredEngine(default_recognizers())
    found = 0
    for text in texts:
        expected = unfiltered.find(text)
        assert engine.find(text) == expected, text
        new, old = engine.redact(text), unfiltered.redact(text)
        assert (new.text, new.findings, new.failed) == (old.text, old.findings, old.failed), text
        found += len(expected)
    assert found > 5000


def test_a_redaction_is_frozen_and_keeps_its_findings() -> None:
    findings = [r.Finding(0, 3, "EMAIL", 70)]
    made = engine_module.Redaction("abc", findings)
    assert made == engine_module.Redaction("abc", list(findings))
    assert made.findings is findings and made.changed and not made.failed
    with pytest.raises(AttributeError):
        made.text = "x"  # type: ignore[misc]


def _reference_apply(text: str, findings: list[r.Finding], placeholders: engine_module.PlaceholderMap) -> str:
    parts: list[str] = []
    pos = 0
    for f in findings:
        parts.append(text[pos : f.start])
        parts.append(placeholders.placeholder(f.kind, text[f.start : f.end]))
        pos = f.end
    parts.append(text[pos:])
    return "".join(parts)


def test_apply_findings_matches_the_plain_loop(texts: list[str]) -> None:
    engine = RedactionEngine()
    new_map, old_map = engine_module.PlaceholderMap(), engine_module.PlaceholderMap()
    for text in texts[:3000]:
        findings = engine.find(text)
        assert engine_module.apply_findings(text, findings, new_map) == _reference_apply(text, findings, old_map)
