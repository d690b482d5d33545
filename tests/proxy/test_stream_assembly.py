"""`assemble_stream` rebuilds the reply a stream amounts to. It gathers texts and token lists in lists joined once
(it had added each chunk's piece to the text so far, quadratic in one-token chunks); the replies it builds must
stay exactly what the earlier version built. `_reference` is that version, verbatim, run on the same streams:
random mixes of every chunk field it reads (roles, contents, completions text, tool-call deltas, token ids,
logprobs of both shapes, usage, errors, several choices out of order) with malformed lines among them."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from evolvable.proxy.capture import _token_logprobs, assemble_stream


def _reference(sse_text: str) -> dict[str, Any]:
    reply: dict[str, Any] = {"choices": []}
    choices: dict[int, dict[str, Any]] = {}
    bad = 0
    for raw_line in sse_text.splitlines():
        line = raw_line.strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            continue
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if not isinstance(chunk, dict):
            bad += 1
            continue
        for key in ("id", "model", "created", "object", "system_fingerprint"):
            if chunk.get(key) is not None and key not in reply:
                reply[key] = chunk[key]
        if chunk.get("error") is not None:
            reply["error"] = chunk["error"]
        if chunk.get("usage"):
            reply["usage"] = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None:
            reply["prompt_token_ids"] = chunk["prompt_token_ids"]
        for c in chunk.get("choices") or ():
            idx = int(c.get("index", 0))
            acc = choices.setdefault(
                idx,
                {
                    "index": idx,
                    "content": None,
                    "text": None,
                    "role": None,
                    "tool_calls": {},
                    "ids": None,
                    "lps": None,
                    "finish_reason": None,
                    "prompt_token_ids": None,
                },
            )
            delta = c.get("delta")
            if isinstance(delta, dict):
                if delta.get("role"):
                    acc["role"] = delta["role"]
                if delta.get("content") is not None:
                    acc["content"] = (acc["content"] or "") + str(delta["content"])
                for tc in delta.get("tool_calls") or ():
                    slot = acc["tool_calls"].setdefault(
                        int(tc.get("index", 0)), {"id": None, "type": "function", "name": "", "arguments": ""}
                    )
                    if tc.get("id"):
                        slot["id"] = tc["id"]
                    fn = tc.get("function") or {}
                    if fn.get("name"):
                        slot["name"] += fn["name"]
                    if fn.get("arguments"):
                        slot["arguments"] += fn["arguments"]
            if c.get("text") is not None:
                acc["text"] = (acc["text"] or "") + str(c["text"])
            if c.get("token_ids") is not None:
                acc["ids"] = (acc["ids"] or []) + list(c["token_ids"])
            if c.get("prompt_token_ids") is not None:
                acc["prompt_token_ids"] = c["prompt_token_ids"]
            lps = _token_logprobs(c.get("logprobs"))
            if lps is not None:
                acc["lps"] = (acc["lps"] or []) + lps
            if c.get("finish_reason") is not None:
                acc["finish_reason"] = c["finish_reason"]
    for idx in sorted(choices):
        acc = choices[idx]
        choice: dict[str, Any] = {"index": idx, "finish_reason": acc["finish_reason"]}
        if acc["text"] is not None and acc["role"] is None and acc["content"] is None:
            choice["text"] = acc["text"]
        else:
            msg: dict[str, Any] = {"role": acc["role"] or "assistant", "content": acc["content"]}
            if acc["tool_calls"]:
                msg["tool_calls"] = [
                    {
                        "id": t["id"] or f"call_{idx}_{i}",
                        "type": t["type"],
                        "function": {"name": t["name"], "arguments": t["arguments"]},
                    }
                    for i, t in sorted(acc["tool_calls"].items())
                ]
            choice["message"] = msg
        if acc["ids"] is not None:
            choice["token_ids"] = acc["ids"]
        if acc["prompt_token_ids"] is not None:
            choice["prompt_token_ids"] = acc["prompt_token_ids"]
        if acc["lps"] is not None:
            choice["_logprob_values"] = acc["lps"]
        reply["choices"].append(choice)
    if bad:
        reply["_malformed_chunks"] = bad
    return reply


def _choice_delta(rng: random.Random, index: int) -> dict[str, Any]:
    c: dict[str, Any] = {"index": index} if rng.random() < 0.9 else {}
    roll = rng.random()
    if roll < 0.55:
        delta: dict[str, Any] = {}
        if rng.random() < 0.2:
            delta["role"] = rng.choice(["assistant", "", None, "tool"])
        if rng.random() < 0.8:
            delta["content"] = rng.choice(["tok ", "", None, "ünï ", 7, "a\nb"])
        if rng.random() < 0.2:
            delta["tool_calls"] = [
                {
                    "index": rng.choice([0, 1]),
                    **({"id": rng.choice(["call_a", "", None])} if rng.random() < 0.5 else {}),
                    "function": {
                        k: v
                        for k, v in (
                            ("name", rng.choice(["look", "up", ""])),
                            ("arguments", rng.choice(['{"q', '": 1}'])),
                        )
                        if rng.random() < 0.7
                    },
                }
            ]
        c["delta"] = delta if rng.random() < 0.95 else "not a dict"
    elif roll < 0.7:
        c["text"] = rng.choice(["done ", "", None, 3])
    if rng.random() < 0.2:
        c["token_ids"] = [rng.randrange(50_000) for _ in range(rng.randrange(0, 4))]
    elif rng.random() < 0.003:
        c["token_ids"] = 5  # neither can assemble that: both raise
    if rng.random() < 0.15:
        c["logprobs"] = rng.choice(
            [
                {"content": [{"token": "x", "logprob": -0.5}, {"token": "y", "logprob": -1.0}]},
                {"content": [{"token": "x", "logprob": -1}, {"token": "y"}]},
                {"token_logprobs": [-0.1, None]},
                {"content": None},
                None,
                "junk",
            ]
        )
    if rng.random() < 0.05:
        c["prompt_token_ids"] = [1, 2, 3]
    if rng.random() < 0.1:
        c["finish_reason"] = rng.choice(["stop", "length", "tool_calls"])
    return c


def _stream(rng: random.Random) -> str:
    lines = []
    choices = rng.choice([[0], [0], [0, 1], [1, 0], [2]])
    for n in range(rng.randrange(1, 40)):
        roll = rng.random()
        if roll < 0.04:
            lines.append("data: {not json")
            continue
        if roll < 0.06:
            lines.append("data: [1, 2]")
            continue
        if roll < 0.08:
            lines.append(": keep-alive")
            continue
        chunk: dict[str, Any] = {"choices": [_choice_delta(rng, i) for i in choices if rng.random() < 0.9]}
        for key in ("id", "model", "created", "object", "system_fingerprint"):
            if rng.random() < 0.5:
                chunk[key] = rng.choice([f"{key}-{n}", None, n])
        if rng.random() < 0.05:
            chunk["usage"] = rng.choice([{"prompt_tokens": 3, "completion_tokens": n}, {}, None])
        if rng.random() < 0.03:
            chunk["error"] = {"message": "overloaded"}
        if rng.random() < 0.03:
            chunk["prompt_token_ids"] = [5, 6]
        lines.append("data:" + rng.choice([" ", "", "  "]) + json.dumps(chunk))
    if rng.random() < 0.8:
        lines.append("data: [DONE]")
    return rng.choice(["\n\n", "\r\n\r\n", "\n"]).join(lines) + "\n\n"


@pytest.mark.parametrize("seed", range(8))
def test_replies_are_what_the_earlier_assembly_built(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        text = _stream(rng)
        try:
            expected: Any = _reference(text)
        except (TypeError, ValueError, AttributeError) as err:  # a stream neither can assemble
            with pytest.raises(type(err)):
                assemble_stream(text)
            continue
        assert assemble_stream(text) == expected


def test_a_long_stream_of_one_token_per_chunk_keeps_every_token() -> None:
    chunks = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": f"t{i} "},
                    "token_ids": [i],
                    "logprobs": {"content": [{"logprob": -i / 10}]},
                }
            ]
        }
        for i in range(3000)
    ]
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    reply = assemble_stream(text)
    (choice,) = reply["choices"]
    assert choice["message"]["content"] == "".join(f"t{i} " for i in range(3000))
    assert choice["token_ids"] == list(range(3000))
    assert choice["_logprob_values"] == [-i / 10 for i in range(3000)]
    assert reply == _reference(text)
