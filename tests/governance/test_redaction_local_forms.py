"""General forms the public corpus showed missing: local phone numbers without an area code (only with a phone word
or a line label), street addresses after a JSON escape, glued street words closing a name of several words, more
national street words, post-office boxes, addresses announced by a context phrase, and repeated addresses; and the
look-alikes each rule must leave alone."""

from __future__ import annotations

import pytest

from evolvable.governance.redaction import RedactionEngine


@pytest.fixture(scope="module")
def engine() -> RedactionEngine:
    return RedactionEngine()


def _found(engine: RedactionEngine, text: str, kind: str) -> list[str]:
    return [text[f.start : f.end] for f in engine.find(text) if f.kind == kind]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Please have the manager call me at 456 0665 today", "456 0665"),
        ("They're not answering at 33 17 13", "33 17 13"),
        ("Personal Info:\\nPhone:\\n466 8983\\n\\nE-mail:", "466 8983"),
        ("Bloom Furniture\\n781 1704 office\\n", "781 1704"),
        ("66 72 64-Fax", "66 72 64"),
    ],
)
def test_local_numbers_with_a_phone_word_or_label(engine: RedactionEngine, text: str, value: str) -> None:
    assert _found(engine, text, "PHONE") == [value]


@pytest.mark.parametrize(
    "text",
    [
        "order 476 1540 shipped",
        "the build took 12 05 19 seconds",
        "call me at 10.30 tomorrow",
        "phone batch 2024-05-19 ready",
        "ticket 781 1704 closed",
    ],
)
def test_local_numbers_without_context_are_kept(engine: RedactionEngine, text: str) -> None:
    assert _found(engine, text, "PHONE") == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Lionel Kiddie City\\n\\n1420 Lillooet Street", "1420 Lillooet Street"),  # after a JSON escape
        ("Universal Design\\n\\n45 rue Pierre Motte", "45 rue Pierre Motte"),
        ("Morville\\n\\nSiikarannantie 59", "Siikarannantie 59"),
        ("The restaurant is located at Johannes van Vlotenlaan 14.", "Johannes van Vlotenlaan 14"),
        ("ship it to Brandenburgische Straße 9, Berlin", "Brandenburgische Straße 9"),
        ("We moved to Lille Vibyvej 8 last year", "Lille Vibyvej 8"),
        ("I'll meet you at Victor Hugo u. 97. after the concert", "Victor Hugo u. 97"),
        ("send it to P.O. Box 77 please", "P.O. Box 77"),
        ("4144 Sycamore Circle", "4144 Sycamore Circle"),
        ("The Rossi office is at 51 rue de la Mare aux Carats", "51 rue de la Mare aux Carats"),
        ("What is your address? it is Democracia 7069", "Democracia 7069"),
        ("Website:\\nMassAccount.uy\\n\\nAddress:\\nHugo Reta 6961.", "Hugo Reta 6961"),
        ("The letter arrived at Grønvangen 4 last night.", "Grønvangen 4"),
        ("The address of Pacific Stereo is Καστελλόκαμπος 193", "Καστελλόκαμπος 193"),
    ],
)
def test_street_addresses(engine: RedactionEngine, text: str, value: str) -> None:
    assert _found(engine, text, "ADDRESS") == [value]


def test_an_address_found_once_is_found_again(engine: RedactionEngine) -> None:
    text = "I need to add my addresses, here they are: Nuussuataap Aqq. 106, and Nuussuataap Aqq. 106"
    assert _found(engine, text, "ADDRESS") == ["Nuussuataap Aqq. 106"] * 2


@pytest.mark.parametrize(
    "text",
    [
        "upgrade to Windows 10 and Python 3 first",
        "the IP address 10.0.0.12 is private",
        "the address moved to a new server in 2019",
        "moved to Berlin in 2019",
        "delivered to Room 101%",
        "a string 5 long",
        "Spring 2024 release",
        "the main road 5 km away",
    ],
)
def test_look_alikes_are_kept(engine: RedactionEngine, text: str) -> None:
    assert _found(engine, text, "ADDRESS") == []


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            "sung by Felicia Eriksson in 2019 (though Eriksson's song was about a boat)",
            ["Felicia Eriksson", "Eriksson"],
        ),
        ('"Don\'t feed me that," says Wit Rutkowski. Rutkowski laughed.', ["Rutkowski", "Rutkowski"]),
        ("It may be too that Saikkonen was influenced; Saikkonen said so", ["Saikkonen", "Saikkonen"]),
        ("As promised, here's Martino's address:", ["Martino"]),
        ("John: Who are you?\\nSoib: You saved my life!", ["John", "Soib"]),
        ("She named him Alibek", ["Alibek"]),
        ("Sometimes people call me Izaak", ["Izaak"]),
        ("Nina lives on Wilhelmsens vei 83", ["Nina"]),
    ],
)
def test_names_by_what_people_do_and_by_earlier_mentions(engine: RedactionEngine, text: str, names: list[str]) -> None:
    assert _found(engine, text, "PERSON") == names


@pytest.mark.parametrize(
    "text",
    [
        "Tracking says JD131629500340 is out for delivery",
        'If-None-Match: "f26933a39052"\nAccept: */*',
        "Status: OK\\nWarning: disk almost full",
        "Will you send the invoice? Mark it paid.",
        "Open Settings and the Billing tab's address field",
    ],
)
def test_things_that_act_like_people_are_kept(engine: RedactionEngine, text: str) -> None:
    assert _found(engine, text, "PERSON") == []
