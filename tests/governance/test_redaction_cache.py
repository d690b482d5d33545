"""The engine's cache of repeated texts: a repeat gets exactly the findings of a fresh scan, and the cache
stays bounded and off for engines built from a caller's own recognizers."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterable
from pathlib import Path

from evolvable.governance.redaction import Finding, PlaceholderMap, RedactionEngine
from evolvable.governance.redaction.engine import _FindingsCache
from evolvable.governance.redaction.recognizers import RegexRecognizer

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"


class Counting:
    """Finds every `zz` and counts its calls."""

    kind = "ZZ"

    def __init__(self) -> None:
        self.calls = 0

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        self.calls += 1
        i = text.find("zz")
        return [Finding(i, i + 2, self.kind)] if i != -1 else []


def _texts() -> list[str]:
    spec = importlib.util.spec_from_file_location("broad", CORPUS / "broad.py")
    assert spec is not None and spec.loader is not None
    broad = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(broad)
    committed = [json.loads(line)["text"] for line in (CORPUS / "redaction_corpus.jsonl").read_text().splitlines()]
    return committed + [r["text"] for r in broad.generate("heldout", n=400, seed=5)]


def test_a_repeated_text_gets_the_findings_of_a_fresh_scan() -> None:
    texts = _texts()
    uncached, cached = RedactionEngine(cache=False), RedactionEngine()
    fresh_map, cached_map = PlaceholderMap(), PlaceholderMap()
    expected = [uncached.redact(t, fresh_map) for t in texts]
    first = [cached.redact(t, cached_map) for t in texts]
    again = [cached.redact(t, cached_map) for t in texts]  # every text now comes from the cache
    assert [(r.text, r.findings) for r in first] == [(r.text, r.findings) for r in expected]
    assert [r.findings for r in again] == [r.findings for r in expected]
    assert sum(bool(r.findings) for r in again) > len(texts) // 2
    assert [r.text for r in again] == [uncached.redact(t, fresh_map).text for t in texts]  # same placeholders


def test_a_cached_answer_is_a_copy() -> None:
    engine = RedactionEngine()
    text = "mail bob@example.com or call (415) 555-0123"
    found = engine.find(text)
    found.clear()
    assert [f.kind for f in engine.find(text)] == ["EMAIL", "PHONE"]


def test_a_repeat_runs_no_recognizer_and_own_recognizers_are_not_cached_unless_asked() -> None:
    counting = Counting()
    engine = RedactionEngine([counting])
    engine.find("a zz b")
    engine.find("a zz b")
    assert counting.calls == 2  # a caller's recognizer may be impure: no cache by default
    cached = RedactionEngine([counting], cache=True)
    assert cached.redact_text("a zz b") == cached.redact_text("a zz b") == "a <ZZ_1> b"
    assert counting.calls == 3
    cached.clear_cache()
    cached.find("a zz b")
    assert counting.calls == 4


def test_the_cache_drops_the_oldest_and_keeps_within_its_bounds() -> None:
    by_entries = _FindingsCache(max_entries=2)
    by_entries.put("aaa", ())
    by_entries.put("bbb", (Finding(0, 1, "X"),))
    assert by_entries.get("bbb") == (Finding(0, 1, "X"),)
    by_entries.put("ccc", ())
    assert by_entries.get("aaa") is None and by_entries.get("bbb") is not None and len(by_entries) == 2
    by_chars = _FindingsCache(max_chars=10, max_text_chars=6)
    for text in ("aaa", "bbb", "ccc"):
        by_chars.put(text, ())
    by_chars.put("dddddd", ())  # 15 characters: the oldest go until 10 or fewer are left
    assert [by_chars.get(t) for t in ("aaa", "bbb", "ccc", "dddddd")] == [None, None, (), ()]
    by_chars.put("eeeeeee", ())  # longer than max_text_chars: not kept
    assert by_chars.get("eeeeeee") is None and len(by_chars) == 2
    by_chars.clear()
    assert len(by_chars) == 0 and by_chars.get("ccc") is None


def test_a_failing_scan_is_not_cached() -> None:
    class FailsOnce:
        kind = "ONCE"
        calls = 0

        def find(self, text: str, lowered: str) -> Iterable[Finding]:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("boom")
            return []

    engine = RedactionEngine([FailsOnce(), RegexRecognizer("ZZ", __import__("re").compile("zz"))], cache=True)
    assert engine.redact("zz").failed
    assert engine.redact_text("zz") == "<ZZ_1>"


def test_threads_sharing_a_small_cache_get_the_findings_of_a_fresh_scan() -> None:
    texts = _texts()[:600]
    expected = [RedactionEngine(cache=False).find(t) for t in texts]
    engine = RedactionEngine()
    engine._cache = _FindingsCache(max_entries=64)  # constant eviction while four threads read and insert
    engine._cached = engine._cache.entries
    results: list[list[list[Finding]]] = [[] for _ in range(4)]

    def work(slot: int) -> None:
        for _ in range(3):
            results[slot].extend(engine.find(t) for t in texts)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(found == expected * 3 for found in results)
    assert len(engine._cache) <= 64
