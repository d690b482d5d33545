"""Token-id redaction with the real SmolLM2 tokenizer (and a tiny hand-built BPE for boundary cases): the new
ids decode to exactly the redacted text, the secret is never decodable, tokens outside findings are untouched."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from evolvable.errors import EvolvableError
from evolvable.governance.redaction import (
    PlaceholderMap,
    RedactionEngine,
    RegexRecognizer,
    TokenCodec,
    TokenIdsMismatch,
    TokenizerRegistry,
)
from evolvable.governance.redaction.token_ids import redact_token_ids
from evolvable.protocol.byte_bpe import unicode_to_byte

EMAIL, PHONE, CARD = "bob.smith@example.com", "415-555-0132", "4111 1111 1111 1111"


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer_json: Path) -> Tokenizer:
    return Tokenizer.from_file(str(smollm2_tokenizer_json))


@pytest.fixture(scope="module")
def codec(tokenizer: Tokenizer) -> TokenCodec:
    return TokenCodec(tokenizer)


@pytest.fixture(scope="module")
def engine() -> RedactionEngine:
    return RedactionEngine()


def _redact(text: str, codec: TokenCodec, engine: RedactionEngine, ids: list[int] | None = None):
    ids = codec.encode(text) if ids is None else ids
    placeholders = PlaceholderMap()
    result = redact_token_ids(ids, codec, engine, placeholders, skip_special=False, logprobs=[-0.5] * len(ids))
    return ids, result


def test_codec_bytes_round_trip_and_non_byte_level_tokenizers_are_refused(codec: TokenCodec) -> None:
    text = "Grüße 中文 😀 — ok\n\t"
    assert codec.decode(codec.encode(text), skip_special=False) == text
    assert codec.decode([2, *codec.encode("hi")], skip_special=True) == "hi"
    assert codec.decode([2, *codec.encode("hi")], skip_special=False) == "<|im_end|>hi"
    word_level = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(ValueError, match="byte-level"):
        TokenCodec(word_level)


def test_redacted_ids_decode_to_exactly_the_redacted_text(
    tokenizer: Tokenizer, codec: TokenCodec, engine: RedactionEngine
) -> None:
    text = f"Hi, I'm at {EMAIL}, phone {PHONE}, card {CARD}. Thanks!"
    ids, result = _redact(text, codec, engine)
    assert result.text == engine.redact(text, PlaceholderMap()).text
    assert result.text == "Hi, I'm at <EMAIL_1>, phone <PHONE_1>, card <CREDIT_CARD_1>. Thanks!"
    assert codec.decode(result.ids, skip_special=False) == result.text
    assert tokenizer.decode(result.ids) == result.text  # the library's own decode agrees
    for secret in (EMAIL, PHONE, CARD, "bob.smith", "0132"):
        assert secret not in tokenizer.decode(result.ids)
    assert len(result.replaced) == 3 and result.logprobs is not None and len(result.logprobs) == len(result.ids)
    for start, end in result.replaced:
        assert "<" in tokenizer.decode(result.ids[start:end])
        assert result.logprobs[start:end] == [0.0] * (end - start)
    outside = [i for i in range(len(result.ids)) if not any(s <= i < e for s, e in result.replaced)]
    assert all(result.logprobs[i] == -0.5 for i in outside)
    # tokens before the first finding are the original ones, untouched
    assert result.ids[: result.replaced[0][0]] == ids[: result.replaced[0][0]]


def test_a_token_crossing_the_finding_keeps_its_outside_part(
    tokenizer: Tokenizer, codec: TokenCodec, engine: RedactionEngine
) -> None:
    text = f"Write to {EMAIL} now"
    ids, result = _redact(text, codec, engine)
    pieces = [tokenizer.decode([i]) for i in ids]
    assert " bob" in pieces, "the space before the email shares a token with it"
    first = pieces.index(" bob")
    (start, end) = result.replaced[0]
    assert start == first and tokenizer.decode(result.ids[start:end]) == " <EMAIL_1>"
    assert result.ids[:start] == ids[:first] and result.ids[end:] == ids[-1:]
    assert tokenizer.decode(result.ids) == "Write to <EMAIL_1> now"


def test_a_non_canonical_tokenization_is_redacted_too(
    tokenizer: Tokenizer, codec: TokenCodec, engine: RedactionEngine
) -> None:
    """The policy samples tokens one by one: an email may arrive as single-byte tokens."""
    to_char = {b: c for c, b in unicode_to_byte().items()}
    byte_ids = [tokenizer.token_to_id(to_char[b]) for b in EMAIL.encode()]
    ids = codec.encode("mail ") + byte_ids + codec.encode(" ok")
    assert tokenizer.decode(ids) == f"mail {EMAIL} ok"
    _, result = _redact("", codec, engine, ids)
    assert tokenizer.decode(result.ids) == "mail <EMAIL_1> ok" and EMAIL not in tokenizer.decode(result.ids)


def test_multi_byte_characters_split_across_tokens_around_a_finding(
    tokenizer: Tokenizer, codec: TokenCodec, engine: RedactionEngine
) -> None:
    text = f"😀 {EMAIL}😀 中文 ñ — {PHONE}—é"
    ids, result = _redact(text, codec, engine)
    pieces = [codec.token_bytes(i) for i in ids]
    split = [p for p in pieces if not _is_utf8(p)]
    assert split, "the emoji is split between tokens"
    assert result.text == "😀 <EMAIL_1>😀 中文 ñ — <PHONE_1>—é"
    assert codec.decode(result.ids, skip_special=False) == result.text == tokenizer.decode(result.ids)
    # the split emoji tokens outside the findings survive as they were
    assert [p for p in (codec.token_bytes(i) for i in result.ids) if not _is_utf8(p)] == split


def _is_utf8(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _cross_boundary_bpe() -> Tokenizer:
    """A byte-level BPE whose merges cross character boundaries: '中' is split as [e4 b8][ad 'Z'], and '2' merges
    with the first byte of a following '中' — tokens that start or end inside a character, next to a finding."""
    to_char = {b: c for c, b in unicode_to_byte().items()}

    def chars(raw: bytes) -> str:
        return "".join(to_char[b] for b in raw)

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges = [(chars(b"2"), chars(b"\xe4")), (chars(b"\xe4"), chars(b"\xb8")), (chars(b"\xad"), chars(b"Z"))]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    return bpe


def test_tokens_that_split_a_character_at_a_finding_are_widened_to_whole_characters() -> None:
    bpe = _cross_boundary_bpe()
    codec = TokenCodec(bpe)
    engine = RedactionEngine([RegexRecognizer("CODE", re.compile(r"Zé[0-9]+"))])
    text = "a中Zé42中b Zé7 x"
    ids = codec.encode(text)
    pieces = [codec.token_bytes(i) for i in ids]
    assert b"\xadZ" in pieces and b"2\xe4" in pieces, "tokens start and end inside '中' at the finding"
    result = redact_token_ids(ids, codec, engine, PlaceholderMap(), skip_special=False)
    assert result.text == "a中<CODE_1>中b <CODE_2> x"
    assert codec.decode(result.ids, skip_special=False) == result.text == bpe.decode(result.ids)
    assert "Zé" not in bpe.decode(result.ids)
    (start, end), _ = result.replaced
    assert bpe.decode(result.ids[start:end]) == "中<CODE_1>中"  # both split characters taken whole
    assert result.ids[:start] == ids[:1]


def test_findings_sharing_a_token_are_replaced_together() -> None:
    bpe = _cross_boundary_bpe()
    codec = TokenCodec(bpe)
    engine = RedactionEngine([RegexRecognizer("CODE", re.compile(r"Zé[0-9]"))])
    ids = codec.encode("a中Zé2中Zé3 b")  # [e4 b8][ad Z]é[2 e4][b8][ad Z]é3: findings share the '2中' token
    result = redact_token_ids(ids, codec, engine, PlaceholderMap(), skip_special=False)
    assert result.text == "a中<CODE_1>中<CODE_2> b" == bpe.decode(result.ids)
    assert len(result.replaced) == 1


def test_a_completion_cut_inside_a_character_decodes_as_the_tokenizer_does(
    tokenizer: Tokenizer, codec: TokenCodec, engine: RedactionEngine
) -> None:
    """max_tokens can stop the policy inside an emoji: those bytes read as U+FFFD, in the text and here."""
    half_emoji = codec.encode("😀")[:1]
    ids = half_emoji + codec.encode(f"{EMAIL} ok") + half_emoji + half_emoji
    assert tokenizer.decode(ids) == f"\ufffd{EMAIL} ok\ufffd\ufffd"
    result = redact_token_ids(ids, codec, engine, PlaceholderMap(), skip_special=False)
    assert result.text == "\ufffd<EMAIL_1> ok\ufffd\ufffd" == tokenizer.decode(result.ids)
    assert result.ids[:1] == half_emoji and result.ids[-2:] == half_emoji * 2


def test_unknown_ids_raise(codec: TokenCodec, engine: RedactionEngine) -> None:
    with pytest.raises(TokenIdsMismatch, match="vocabulary"):
        redact_token_ids([10**9], codec, engine, PlaceholderMap(), skip_special=False)


def test_random_texts_never_keep_a_decodable_secret(
    tokenizer: Tokenizer, codec: TokenCodec, engine: RedactionEngine
) -> None:
    rng = random.Random(7)
    neighbours = ["", " ", "😀", "中文", "é", "—", "\n", ":", "(", "’s", "ñ "]
    secrets = [EMAIL, PHONE, CARD, "amy.lee@example.org", "+1 (212) 555-0199"]
    checked = redacted_secrets = 0
    for _ in range(150):
        planted = rng.sample(secrets, 2)
        parts = [rng.choice(["Hi", "Please", "Ok"])]
        for secret in planted:
            parts += [rng.choice(neighbours), secret, rng.choice(neighbours), rng.choice(["x", "and", "."])]
        text = "".join(parts)
        ids = codec.encode(text)
        if rng.random() < 0.5:  # the policy's own token choices need not be canonical
            cut = rng.randrange(1, len(text))
            ids = codec.encode(text[:cut]) + codec.encode(text[cut:])
        if rng.random() < 0.2:  # a stray half character, as a truncated or odd sample leaves
            ids.insert(rng.randrange(len(ids)), codec.encode("😀")[0])
            text = tokenizer.decode(ids)
        result = redact_token_ids(ids, codec, engine, PlaceholderMap(), skip_special=False)
        decoded = tokenizer.decode(result.ids)
        assert decoded == result.text == engine.redact(text, PlaceholderMap()).text
        found = [text[f.start : f.end] for f in engine.find(text)]
        assert not any(value in decoded for value in found), text
        checked += 1
        redacted_secrets += len(found)
    assert checked > 100 and redacted_secrets > 150


def test_registry_loads_lazily_once_with_fallback_and_survives_a_missing_tokenizer(
    smollm2_tokenizer_json: Path, tmp_path: Path
) -> None:
    registry = TokenizerRegistry.from_spec(f"smollm2-135m={smollm2_tokenizer_json.parent}, *={smollm2_tokenizer_json}")
    first = registry.codec_for("smollm2-135m")
    assert first is not None and registry.codec_for("smollm2-135m") is first
    assert registry.codec_for("support-lora-3") is not None  # an adapter name: the `*` fallback
    strict = TokenizerRegistry({"smollm2-135m": smollm2_tokenizer_json, "gone": tmp_path / "missing"})
    assert strict.codec_for("other-model") is None and strict.codec_for(None) is None
    assert strict.codec_for("gone") is None  # logged once, ids dropped, nothing raised
    assert not TokenizerRegistry.from_spec(None) and not TokenizerRegistry.from_spec("")


@pytest.mark.parametrize("spec", ["smollm2-135m", "=path", "model=", "a=b,c"])
def test_a_malformed_tokenizer_setting_is_a_clear_error(spec: str) -> None:
    with pytest.raises(EvolvableError, match="model=path"):
        TokenizerRegistry.from_spec(spec)


def test_an_unregistered_fallback_is_refused() -> None:
    with pytest.raises(EvolvableError, match="not registered"):
        TokenizerRegistry({}, fallback="smollm2-135m")
