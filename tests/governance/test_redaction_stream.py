"""StreamRedactor: a value split anywhere across chunks is still caught, and the buffer stays bounded."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from evolvable.governance.redaction import (
    FAILED_MARKER,
    Finding,
    PlaceholderMap,
    RedactionEngine,
    StreamRedactor,
    default_recognizers,
)

PEM_BODY = [
    "MIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK==",
]
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(PEM_BODY) + "\n-----END RSA PRIVATE KEY-----"
PLANTED = [
    "bob.smith@example.com",
    "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_Ab3dEf6hIj9",
    "4111 1111 1111 1111",
    "hunter2!x",
    "+44 20 7946 0958",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    *PEM_BODY,
]
TEXT = (
    f"Sure! Mail {PLANTED[0]} and use key {PLANTED[1]}; the card {PLANTED[2]} failed, "
    f"password={PLANTED[3]} then call {PLANTED[4]}. Token {PLANTED[5]} expired.\n{PEM}\nDone, order ORD-2026-1."
)


@pytest.fixture(scope="module")
def engine() -> RedactionEngine:
    return RedactionEngine()


def _run(engine: RedactionEngine, chunks: list[str], holdback: int = 48) -> str:
    stream = StreamRedactor(engine, PlaceholderMap(), holdback=holdback)
    return "".join(stream.feed(c) for c in chunks) + stream.flush()


def test_every_split_position_gives_the_same_output_as_batch(engine: RedactionEngine) -> None:
    expected = engine.redact_text(TEXT)
    assert not any(v in expected for v in PLANTED)
    for i in range(len(TEXT) + 1):
        out = _run(engine, [TEXT[:i], TEXT[i:]])
        assert out == expected, f"split at {i}: {out!r}"


def test_token_by_token_and_three_way_splits(engine: RedactionEngine) -> None:
    expected = engine.redact_text(TEXT)
    assert _run(engine, list(TEXT)) == expected
    for i in range(0, len(TEXT), 7):
        for j in range(i, len(TEXT), 23):
            assert _run(engine, [TEXT[:i], TEXT[i:j], TEXT[j:]]) == expected


def test_text_is_emitted_early_with_a_bounded_buffer(engine: RedactionEngine) -> None:
    stream = StreamRedactor(engine, holdback=64)
    emitted = ""
    for n in range(200):
        emitted += stream.feed(f"word{n} ")
        assert stream.buffered <= 64 + 16
    assert len(emitted) > 1000  # not held until the end
    assert emitted + stream.flush() == "".join(f"word{n} " for n in range(200))


def test_a_long_private_key_is_swallowed_in_constant_memory(engine: RedactionEngine) -> None:
    body = "\n".join("QUJD" * 16 for _ in range(400))  # ~26 KB of key body, longer than any buffer
    text = f"key:\n-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\nbye"
    stream = StreamRedactor(engine, holdback=64)
    out, peak = "", 0
    for i in range(0, len(text), 50):
        out += stream.feed(text[i : i + 50])
        peak = max(peak, stream.buffered)
    out += stream.flush()
    assert out == "key:\n<PRIVATE_KEY_1>\nbye" and peak < 200


class Exploding:
    kind = "EXPLODING"

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        if "boom" in text:
            raise RuntimeError("crash")
        return ()


def test_stream_fails_closed(engine: RedactionEngine) -> None:
    failures: list[str] = []
    broken = RedactionEngine([*default_recognizers(), Exploding()], on_failure=lambda k, e: failures.append(k))
    stream = StreamRedactor(broken, holdback=16)
    out = stream.feed("all fine so far, nothing to see here at all. ") + stream.feed("boom bob@example.com")
    out += stream.feed(" more") + stream.flush()
    assert "bob@example.com" not in out and out.endswith(FAILED_MARKER) and failures == ["EXPLODING"]
