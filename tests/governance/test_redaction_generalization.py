"""Redaction that generalizes: national phone formats, spaced SSNs, secrets in every config syntax, street
addresses and person names, measured on the broad generator's tuned configuration AND on its held-out
configuration (other templates, key names, formats and a different name vocabulary, never tuned on).

The targets are the issue's: structured recall >= 0.98, person recall >= 0.90, hard-negative damage <= 2%.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from evolvable.governance.redaction import RedactionEngine
from evolvable.governance.redaction.evaluation import score
from evolvable.governance.redaction.phones import valid_international, valid_national
from evolvable.governance.redaction.recognizers import key_kind


def _broad() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "broad", Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "broad.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def engine() -> RedactionEngine:
    return RedactionEngine()


@pytest.fixture(scope="module")
def broad() -> ModuleType:
    return _broad()


def _found(engine: RedactionEngine, text: str) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start : f.end]) for f in engine.find(text)]


@pytest.mark.parametrize(
    "text, value",
    [
        ("Ruf mich an: 030/12345678", "030/12345678"),
        ("call me on 0121 233 6263 please", "0121 233 6263"),
        ("mon numéro: 06 12 34 56 78.", "06 12 34 56 78"),
        ("tel 0612-345678", "0612-345678"),
        ("móvil 612 34 56 78", "612 34 56 78"),
        ("cell 02 9374 4000", "02 9374 4000"),
        ("WhatsApp (11) 96128-9913", "(11) 96128-9913"),
        ("ring 0044 20 7946 0958 today", "0044 20 7946 0958"),
        ("numero 0039 312 347 3304", "0039 312 347 3304"),
        ("My number changed to 810142252", None),
    ],
)
def test_national_phone_formats(engine: RedactionEngine, text: str, value: str | None) -> None:
    found = _found(engine, text)
    if value is None:  # a bare 9-digit number valid nowhere near a phone word: kept (documented gap)
        return
    assert ("PHONE", value) in found, found


@pytest.mark.parametrize(
    "text",
    [
        "order 9175152107 shipped",  # a bare 10-digit id is a valid US number: no phone word, kept
        "ORD-2024-118834 and INV-2024-000123",
        "built 2024-03-15 14:22:01 from v10.0.19045.3803",
        "dates 15.03.2024, 03/15/2024 and 2024/03/15",
        "ISBN 978-3-16-148410-0, 200 0.8592 ms, Chrome 103.0.4843.71",
        "private 10.12.3.4:5432 and 192.168.1.20",
    ],
)
def test_number_hard_negatives_are_kept(engine: RedactionEngine, text: str) -> None:
    assert [f for f in _found(engine, text) if f[0] in ("PHONE", "SSN")] == []


def test_phone_validation_uses_libphonenumber_metadata() -> None:
    assert valid_national("03012345678") and valid_national("0612345678") and valid_national("612345678")
    assert not valid_national("0000000000") and not valid_national("12")
    assert valid_international("442079460958") and not valid_international("999123")


@pytest.mark.parametrize("ssn", ["123 45 6789", "123.45.6789", "123 - 45 - 6789", "123-45-6789"])
def test_spaced_and_dotted_ssns(engine: RedactionEngine, ssn: str) -> None:
    assert ("SSN", ssn) in _found(engine, f"the applicant's number is {ssn} per the form")


def test_invalid_ssns_are_kept(engine: RedactionEngine) -> None:
    assert [f for f in _found(engine, "codes 000 12 3456 and 666 12 3456") if f[0] == "SSN"] == []


@pytest.mark.parametrize(
    "config, value",
    [
        ("ADMINPWD=Adrichem250*", "Adrichem250*"),
        ("MASTERKEY=M/3Wka+lQ1LyrbldIdaTg9X3cZTODDf+IYEQVZk6YGo", "M/3Wka+lQ1LyrbldIdaTg9X3cZTODDf+IYEQVZk6YGo"),
        ('hmac_key: "d798aed0dc36e68549a03246c0b4fba4f30d0b01"', "d798aed0dc36e68549a03246c0b4fba4f30d0b01"),
        ("[database]\napp_secret = r6&bMXFWC2jly", "r6&bMXFWC2jly"),
        ('{"github_pat": "225afe92ba23f29e6d8b26abaa7093ae719e30f2"}', "225afe92ba23f29e6d8b26abaa7093ae719e30f2"),
        ("KEYSTORE_PASS='41O70b&FwK6b'", "41O70b&FwK6b"),
    ],
)
def test_secrets_in_config_syntaxes(engine: RedactionEngine, config: str, value: str) -> None:
    assert any(text == value for _, text in _found(engine, config)), _found(engine, config)


def test_secret_key_words_that_are_not_secrets() -> None:
    for key in ("cache_key", "primary_key", "sort_key", "idempotency_key", "public_key", "monkey", "bypass"):
        assert key_kind(key) is None, key
    assert key_kind("hmac_key") == key_kind("MASTERKEY") == key_kind("github_pat") == "token"
    assert key_kind("ADMINPWD") == "password"


@pytest.mark.parametrize(
    "token",
    [
        "glpat-jRbynhgIDnrIFAh2ehUU",
        "npm_kr3f4Z8TgOp9YXyQtzMhjjnmXl7VK1j5mtaP",
        "SG.4JJsMUzny-785cARlkE9SZ.k9m-gg0v8xZbwjkZ6OwGppEUk9m-gg0v8xZbwjkZ6Ow",
    ],
)
def test_more_token_formats(engine: RedactionEngine, token: str) -> None:
    assert [text for _, text in _found(engine, f"leaked {token} today")] == [token]


@pytest.mark.parametrize(
    "address",
    [
        "1353 Maple Street", "221B Baker Street", "18 Rakuljić Blvd", "Hauptstraße 12", "Kerkstraat 12",
        "12 rue de la Paix", "Calle Mayor 5", "Via Roma 10", "Rua das Hortências 1428", "ul. Białołęcka 48",
        "Síp utca 36", "1411, Hagman Road",
    ],
)  # fmt: skip
def test_street_addresses(engine: RedactionEngine, address: str) -> None:
    assert ("ADDRESS", address) in _found(engine, f"please ship to {address}, thanks"), _found(engine, address)


def test_street_words_without_a_house_number_are_kept(engine: RedactionEngine) -> None:
    text = "Wall Street closed; take the main road; the Via Appia is old; see roadmap and Streets docs"
    assert [f for f in _found(engine, text) if f[0] == "ADDRESS"] == []


@pytest.mark.parametrize(
    "text, name",
    [
        ("Hi, I'm Priya Raghunathan and my order is late.", "Priya Raghunathan"),
        ("Please ask Chukwuemeka Okafor-Eze about it.", "Chukwuemeka Okafor-Eze"),
        ("Dear Ms. Kowalska, thanks.", "Kowalska"),
        ('{"customer_name": "Zsigmond Hautala"}', "Zsigmond Hautala"),
        ("Regards,\nLudwig van Dijk\nSupport", "Ludwig van Dijk"),
        ("Hi Rose, the refund went out.", "Rose"),
        ('{"content": "Thanks!\\nKali Hautala"}', "Kali Hautala"),
        ("I talked to Zsigmond yesterday.", "Zsigmond"),
    ],
)
def test_person_names(engine: RedactionEngine, text: str, name: str) -> None:
    assert ("PERSON", name) in _found(engine, text), _found(engine, text)


@pytest.mark.parametrize(
    "text",
    [
        "Will the package arrive before Friday?",
        "Please Mark the ticket as resolved and Grant read access.",
        "Payment from Chase Bank arrived in May.",
        "We use Microsoft Teams and Google Drive; the office in Rio de Janeiro handles returns.",
        "Open Order History > Account Settings on GitHub and check the JSON API.",
        "Flights to New York, Kuala Lumpur and Tel Aviv are delayed.",
    ],
)
def test_capitalised_words_that_are_not_people(engine: RedactionEngine, text: str) -> None:
    assert [f for f in _found(engine, text) if f[0] == "PERSON"] == []


def _result(engine: RedactionEngine, records: list[dict[str, Any]]) -> dict[str, Any]:
    return score(records, {r["id"]: [(f.start, f.end) for f in engine.find(r["text"])] for r in records})


@pytest.mark.parametrize("config, seed", [("tuned", 11), ("heldout", 12)])
def test_targets_on_the_broad_corpora(engine: RedactionEngine, broad: ModuleType, config: str, seed: int) -> None:
    records = broad.generate(config, n=900, seed=seed)
    result = _result(engine, records)
    misses = [m for m in result["misses"] if m["type"] != "PERSON"][:10]
    assert result["recall_structured"] >= 0.98, (result["recall_by_type"], misses)
    assert result["recall_by_group"]["person"] >= 0.90, result["recall_by_group"]
    assert result["damage"] <= 0.02, result["damaged_by_type"]


def test_redacted_broad_text_keeps_no_structured_value(engine: RedactionEngine, broad: ModuleType) -> None:
    leaks = []
    for r in broad.generate("heldout", n=300, seed=13):
        out = engine.redact_text(r["text"])
        values = [r["text"][s["start"] : s["end"]] for s in r["spans"] if s["group"] != "person"]
        leaks += [value for value in values if value in out]
    assert len(leaks) <= 3, leaks


def test_public_corpus_when_installed(engine: RedactionEngine, broad: ModuleType) -> None:
    records = broad.public_corpus(n=600, seed=14)
    if records is None:
        pytest.skip("presidio-evaluator's data is not installed (pip install --no-deps presidio-evaluator)")
    result = _result(engine, records)
    # presidio-evaluator's own data, never tuned on: recorded in docs/redaction.md, held to a floor here
    for kind in ("CREDIT_CARD", "EMAIL", "IBAN", "SSN"):
        assert result["recall_by_type"][kind] >= 0.98, result["recall_by_type"]
    assert result["recall_by_type"]["PHONE"] >= 0.85 and result["recall_by_group"]["person"] >= 0.70
