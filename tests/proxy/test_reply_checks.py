"""The hot path's reply checks that do not build the reply: `check_reply_shape` (a reply passed on as it came) and
`stripped_reply` (the client's copy without the token fields the proxy asked for). Both must give the verdict
and the result of parsing the reply with orjson and `strip_token_fields`, on replies of any shape."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import orjson
import pytest
from tests.proxy.mock_upstream import _MALFORMED_REPLIES

from evolvable.proxy.capture import check_reply_shape, strip_token_fields, stripped_reply

KEEP = list(itertools.product((False, True), repeat=2))


def _parsed_verdict(raw: bytes) -> bool:
    """What the hot path decided by parsing: a JSON object with a `choices` array."""
    try:
        reply = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(reply, dict) and isinstance(reply.get("choices"), list)


def _parsed_strip(raw: bytes, keep_ids: bool, keep_lps: bool) -> Any:
    reply = orjson.loads(raw)
    strip_token_fields(reply, keep_ids, keep_lps)
    return reply


def _token_reply(choices: int = 2, spaced: bool = False) -> bytes:
    reply = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "vllm-model",
        "prompt_token_ids": list(range(50)),
        "prompt_logprobs": [None, {"1": {"logprob": -0.5}}],
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": f"answer {i} — ✓", "tool_calls": None},
                "token_ids": [7, 8, 9],
                "prompt_token_ids": [1, 2],
                "logprobs": {"content": [{"token": "a", "logprob": -0.1, "top_logprobs": []}] * 3},
                "finish_reason": "stop",
            }
            for i in range(choices)
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 3, "total_tokens": 53},
    }
    return json.dumps(reply, indent=2 if spaced else None, ensure_ascii=False).encode()


def _random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-(10**12), 10**12)
    if kind == 2:
        return rng.uniform(-1e6, 1e6)
    if kind in (3, 4):
        return "".join(rng.choice('ab "\\/{}[]:,é東✓\n\t\u2028') for _ in range(rng.randrange(12)))
    if kind == 5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return _random_object(rng, depth)


def _random_object(rng: random.Random, depth: int) -> dict[str, Any]:
    keys = ["token_ids", "prompt_token_ids", "logprobs", "text", "message", "x", "é"]
    return {rng.choice(keys): _random_value(rng, depth + 1) for _ in range(rng.randrange(5))}


def _random_reply(rng: random.Random) -> bytes:
    top_keys = ["id", "model", "prompt_token_ids", "prompt_logprobs", "usage", "choices", "extra"]
    reply = {key: _random_value(rng, 1) for key in rng.sample(top_keys, rng.randrange(len(top_keys)))}
    if rng.random() < 0.8:
        reply["choices"] = [
            _random_value(rng, 2) if rng.random() < 0.15 else {**_random_object(rng, 3), "index": i}
            for i in range(rng.randrange(4))
        ]
    return json.dumps(reply, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5).encode()


@pytest.mark.parametrize("keep_ids, keep_lps", KEEP)
def test_the_stripped_copy_equals_parsing_and_stripping(keep_ids: bool, keep_lps: bool) -> None:
    for raw in (_token_reply(), _token_reply(3, spaced=True), b'{"choices":[1,"x",null,{"token_ids":[1]}]}'):
        assert orjson.loads(stripped_reply(raw, keep_ids, keep_lps)) == _parsed_strip(raw, keep_ids, keep_lps)
    stripped = orjson.loads(stripped_reply(_token_reply(), keep_ids, keep_lps))
    assert ("prompt_token_ids" in stripped) is keep_ids and ("token_ids" in stripped["choices"][0]) is keep_ids
    assert (stripped["choices"][0]["logprobs"] is not None) is keep_lps


def test_a_thousand_random_replies_get_the_verdict_and_the_copy_of_a_parse() -> None:
    rng = random.Random(20261126)
    refused = 0
    for _ in range(1000):
        raw = _random_reply(rng)
        verdict = _parsed_verdict(raw)
        refused += not verdict
        assert _accepts(check_reply_shape, raw) is verdict, raw
        for keep_ids, keep_lps in KEEP:
            if not verdict:
                assert not _accepts(lambda r, i=keep_ids, lp=keep_lps: stripped_reply(r, i, lp), raw), raw
                continue
            copy = orjson.loads(stripped_reply(raw, keep_ids, keep_lps))
            assert copy == _parsed_strip(raw, keep_ids, keep_lps), raw
    assert 100 < refused < 900  # both verdicts were exercised


@pytest.mark.parametrize("name", sorted(_MALFORMED_REPLIES))
def test_replies_no_client_can_use_are_refused_by_both(name: str) -> None:
    raw = _MALFORMED_REPLIES[name]
    assert not _parsed_verdict(raw)
    assert not _accepts(check_reply_shape, raw)
    assert not _accepts(lambda r: stripped_reply(r, False, False), raw)


def test_deep_nesting_and_invalid_utf8_anywhere_are_refused() -> None:
    deep = b'{"x":' + b"[" * 5000 + b"]" * 5000 + b',"choices":[]}'
    for raw in (deep, b'{"choices":[],"x":"\xc3"}', b'{"choices":[{"t":"\xed\xa0\x80"}]}'):
        assert not _parsed_verdict(raw)
        assert not _accepts(check_reply_shape, raw)
        assert not _accepts(lambda r: stripped_reply(r, False, False), raw)


def _accepts(check: Any, raw: bytes) -> bool:
    try:
        check(raw)
    except ValueError:
        return False
    return True
