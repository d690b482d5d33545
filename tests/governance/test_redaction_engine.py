"""The redaction engine: coverage per type, hard negatives, JSON-escaped text, placeholders, fail-closed."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pytest

from evolvable.errors import RedactionFailed
from evolvable.governance import redaction
from evolvable.governance.redaction import (
    FAILED_MARKER,
    Finding,
    PlaceholderMap,
    RedactionEngine,
    default_recognizers,
    redact_text,
)


@pytest.fixture(scope="module")
def engine() -> RedactionEngine:
    return RedactionEngine()


PLANTED = [
    ("EMAIL", "write to maria.gonzalez+billing@acme-corp.io today"),
    ("PHONE", "call (415) 555-0123 after six"),
    ("PHONE", "call 1-800-555-0199 now"),
    ("PHONE", "UK office +44 20 7946 0958"),
    ("PHONE", "mobile: +91 98765 43210"),
    ("PHONE", "phone 4155550123 please"),
    ("CREDIT_CARD", "card 4111 1111 1111 1111 exp 12/29"),
    ("CREDIT_CARD", "amex 3782-822463-10005"),
    ("IBAN", "IBAN DE89 3704 0044 0532 0130 00 please"),
    ("IBAN", "to GB82WEST12345698765432."),
    ("SSN", "SSN 123-45-6789"),
    ("IP_ADDRESS", "from 34.201.12.9:443"),
    ("IP_ADDRESS", "resolver 2001:4860:4860::8888"),
    ("AWS_ACCESS_KEY", "AKIAIOSFODNN7EXAMPLE"),
    ("AWS_SECRET_KEY", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("GITHUB_TOKEN", "token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"),
    ("OPENAI_KEY", "OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_Ab3dEf6hIj9"),
    ("ANTHROPIC_KEY", "sk-ant-api03-" + "aB3_" * 23 + "xAA"),
    ("SLACK_TOKEN", "bot xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("STRIPE_KEY", 'stripe.api_key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"'),
    ("GOOGLE_API_KEY", "key=AIzaSyA-1234567890abcdefghijklmnopqrstu"),
    ("JWT", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("PASSWORD", "postgresql://app:S3cr3t-pw@db.internal:5432/prod"),
    ("SECRET", "DB_PASSWORD=hunter2!"),
    ("SECRET", '{"api_key": "3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"}'),
    ("SECRET", "redis:\n  password: Tr0ub4dor3"),
    ("SECRET", "mysql --password=Tr0ub4dor3 orders"),
]


@pytest.mark.parametrize(("kind", "text"), PLANTED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(PLANTED)])
def test_planted_value_becomes_typed_placeholder(engine: RedactionEngine, kind: str, text: str) -> None:
    out = engine.redact_text(text)
    assert f"<{kind}_1>" in out, out


def test_pem_private_key_is_removed_with_its_body(engine: RedactionEngine) -> None:
    body = [
        "MIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
        "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK",
    ]
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END RSA PRIVATE KEY-----"
    for text in (f"key:\n{pem}\nend", json.dumps({"private_key": pem})):
        out = engine.redact_text(text)
        assert "<PRIVATE_KEY_1>" in out
        assert not any(line[:20] in out for line in body)
    truncated = engine.redact_text("-----BEGIN PRIVATE KEY-----\n" + body[0] + "\n" + body[1][:30])
    assert body[0][:20] not in truncated and body[1][:20] not in truncated


HARD_NEGATIVES = [
    "order ORD-2026-558812 and #A10023994",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 short 9fceb02",
    "digest sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef",
    "version v1.2.3, 2.31.0, 3.11.7 and build 114.0.5735.90",
    "at 2026-11-22T10:15:30Z or 2026-11-22 10:15:30 epoch 1732245600 ms 1732245600123",
    "price $1,234.56 or €49.99",
    "item SKU-448-221-9034 and AB-1234-XY",
    "listening on port 5432 and :8080",
    "hosts 10.0.0.12, 192.168.1.5, 172.16.4.2, 127.0.0.1, ::1, fe80::1ff:fe23:4567:890a",
    "move to S3 on EKS with C4 and EC2",
    "order number 4111111111111112",
    '{"max_tokens": 512, "token_count": 1834, "cache_key": "user:1234:profile", "password_min_length": 12}',
    "password: ${DB_PASSWORD}\ntoken: <your-token-here>\napi_key: null",
    "Your password must be at least 12 characters; the reset token expires in 30 minutes.",
    "mac 00:1A:2B:3C:4D:5E at 12:34:56.789",
]


@pytest.mark.parametrize("text", HARD_NEGATIVES)
def test_hard_negative_survives(engine: RedactionEngine, text: str) -> None:
    assert engine.redact_text(text) == text


def test_values_inside_json_escaped_strings(engine: RedactionEngine) -> None:
    inner = {"password": "hunter2!x", "note": "line one\nbob@example.com\n4111111111111111"}
    escaped = json.dumps({"role": "tool", "content": json.dumps(inner)})
    out = engine.redact_text(escaped)
    assert "hunter2!x" not in out and "bob@example.com" not in out and "4111111111111111" not in out
    assert json.loads(json.loads(out)["content"])["password"] == "<SECRET_1>"  # still valid, twice-encoded JSON


def test_placeholders_are_consistent_within_one_map(engine: RedactionEngine) -> None:
    placeholders = PlaceholderMap()
    first = engine.redact_text("from bob@example.com and amy@example.com", placeholders)
    second = engine.redact_text("reply to BOB@example.com, cc (415) 555-0123 and +1 415 555 0123", placeholders)
    assert first == "from <EMAIL_1> and <EMAIL_2>"
    assert second == "reply to <EMAIL_1>, cc <PHONE_1> and <PHONE_1>"
    assert engine.redact_text("bob@example.com was here") == "<EMAIL_1> was here"  # a fresh map per call


def test_redact_json_text_keeps_arguments_valid(engine: RedactionEngine) -> None:
    args = json.dumps({"email": "bob@example.com", "card": 4111111111111111, "order": "ORD-2026-1", "pw": "x"})
    result = engine.redact_json_text(args)
    parsed = json.loads(result.text)
    assert parsed["email"] == "<EMAIL_1>" and parsed["card"] == "<CREDIT_CARD_1>" and parsed["order"] == "ORD-2026-1"


def test_redact_value_uses_the_key_as_context(engine: RedactionEngine) -> None:
    value, changed = engine.redact_value(
        {"db": {"password": "correct horse battery", "pwd": 48151623}, "max_tokens": 64}
    )
    assert changed and value == {"db": {"password": "<SECRET_1>", "pwd": "<SECRET_2>"}, "max_tokens": 64}
    same, changed = engine.redact_value({"note": "nothing here", "n": [1, 2.5, None, True]})
    assert not changed and same == {"note": "nothing here", "n": [1, 2.5, None, True]}


class Exploding:
    kind = "EXPLODING"

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        raise RuntimeError("boom")


def test_failing_recognizer_fails_closed_and_calls_the_hook() -> None:
    calls: list[tuple[str, str]] = []
    engine = RedactionEngine([*default_recognizers(), Exploding()], on_failure=lambda k, e: calls.append((k, str(e))))
    result = engine.redact("mail bob@example.com")
    assert result.failed and result.text == FAILED_MARKER
    assert calls == [("EXPLODING", "boom")]
    with pytest.raises(RedactionFailed):
        engine.find("anything")
    value, changed = engine.redact_value({"a": "x", "b": ["y"]})
    assert changed and value == {FAILED_MARKER: FAILED_MARKER, f"{FAILED_MARKER}#1": [FAILED_MARKER]}


def test_a_raising_hook_does_not_open_the_failure() -> None:
    def hook(kind: str, error: BaseException) -> None:
        raise ValueError("hook broke")

    engine = RedactionEngine([Exploding()], on_failure=hook)
    assert engine.redact_text("secret stuff") == FAILED_MARKER


def test_module_level_helpers_and_public_names() -> None:
    assert redact_text("ping 8.8.8.8") == "ping <IP_ADDRESS_1>"
    for name in redaction.__all__:
        assert hasattr(redaction, name)


def test_person_names_need_spacy() -> None:
    pytest.importorskip("spacy", reason="exercised by the benchmark's peer environment")
    engine = RedactionEngine(person_names=True)
    assert "<PERSON_1>" in engine.redact_text("Yesterday Maria Gonzalez called about her order.")


def test_overlap_resolution_keeps_the_strongest_non_overlapping_findings() -> None:
    import random

    from evolvable.governance.redaction.engine import resolve_overlaps

    def brute_force(findings: list[Finding]) -> list[Finding]:
        kept: list[Finding] = []
        for f in sorted(findings, key=lambda f: (-f.priority, f.start - f.end, f.start)):
            if all(f.end <= k.start or f.start >= k.end for k in kept):
                kept.append(f)
        return sorted(kept, key=lambda f: f.start)

    rng = random.Random(7)
    for _ in range(500):
        findings = []
        for _ in range(rng.randint(0, 12)):
            start = rng.randint(0, 40)
            findings.append(Finding(start, start + rng.randint(1, 10), "X", rng.choice([10, 50, 90])))
        assert resolve_overlaps(findings) == brute_force(findings)
