"""The labeled corpus: recall and hard-negative targets, and the committed corpus matches its generator."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from evolvable.governance.redaction import RedactionEngine
from evolvable.governance.redaction.evaluation import STRUCTURED_GROUPS, load_corpus, score

CORPUS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"
CORPUS = CORPUS_DIR / "redaction_corpus.jsonl"


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return load_corpus(CORPUS)


@pytest.fixture(scope="module")
def result(records: list[dict]) -> dict:
    engine = RedactionEngine()
    return score(records, {r["id"]: [(f.start, f.end) for f in engine.find(r["text"])] for r in records})


def test_corpus_is_big_and_varied_enough(records: list[dict]) -> None:
    planted = [s for r in records for s in r["spans"] if s["group"] != "person"]
    negatives = [n for r in records for n in r["negatives"]]
    assert len(planted) >= 800 and len(negatives) >= 1000
    assert {s["group"] for s in planted} == set(STRUCTURED_GROUPS)
    assert any("json_escaped" in r["kind"] for r in records)
    assert CORPUS.stat().st_size < 2_000_000


def test_recall_per_group_and_overall(result: dict) -> None:
    assert result["recall_structured"] >= 0.98, result["misses"][:10]
    for group in STRUCTURED_GROUPS:
        assert result["recall_by_group"][group] >= 0.98, (group, result["misses"][:10])


def test_hard_negatives_are_kept(result: dict) -> None:
    assert result["damage"] <= 0.02, result["damaged_by_type"]


def test_redacted_text_contains_no_planted_value(records: list[dict]) -> None:
    engine = RedactionEngine()
    leaks = []
    for r in records:
        out = engine.redact_text(r["text"])
        leaks += [
            r["text"][s["start"] : s["end"]]
            for s in r["spans"]
            if s["group"] != "person" and r["text"][s["start"] : s["end"]] in out
        ]
    assert leaks == []


def test_committed_corpus_matches_the_generator() -> None:
    spec = importlib.util.spec_from_file_location("corpus_generate", CORPUS_DIR / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    regenerated = [json.dumps(r, ensure_ascii=False) for r in module.generate()]
    assert regenerated == CORPUS.read_text(encoding="utf-8").splitlines()


def test_scoring_counts_partial_redaction_as_a_miss() -> None:
    record = {
        "id": "x",
        "text": "card 4111 1111 1111 1111",
        "spans": [{"start": 5, "end": 24, "type": "CREDIT_CARD", "group": "financial"}],
        "negatives": [],
    }
    assert score([record], {"x": [(5, 19)]})["recall_structured"] == 0.0
    assert score([record], {"x": [(5, 24)]})["recall_structured"] == 1.0
