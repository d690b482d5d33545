"""Automatic prefix caching: the store's rules on toy tensors, then the engine on the real model."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from evolvable.policy_server.prefix_cache import PrefixCache

LAYERS = 2


def states(ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fake per-layer states whose values identify (layer, token) so slices can be checked."""
    out = []
    for layer in range(LAYERS):
        keys = torch.tensor([[layer * 1000.0 + t] * 4 for t in ids]).reshape(1, 1, len(ids), 4)
        out.append((keys, -keys))
    return out


def test_lookup_returns_the_longest_cached_prefix_and_leaves_a_token_to_prefill() -> None:
    cache = PrefixCache(1 << 20, min_tokens=2)
    cache.insert([1, 2, 3, 4, 5], None, states([1, 2, 3, 4, 5]))
    cache.insert([1, 2, 9, 9, 9, 9], None, states([1, 2, 9, 9, 9, 9]))
    found = cache.lookup([1, 2, 3, 4, 7, 8], None)
    assert found is not None and found.length == 4
    keys, values = found.layers[1]
    assert keys.shape[2] == 4 and keys[0, 0, :, 0].tolist() == [1001.0, 1002.0, 1003.0, 1004.0]
    assert torch.equal(values, -keys)
    whole = cache.lookup([1, 2, 3, 4, 5], None)  # the same prompt: its last token is still prefilled
    assert whole is not None and whole.length == 4


def test_short_matches_other_scopes_and_dropped_scopes_miss() -> None:
    cache = PrefixCache(1 << 20, min_tokens=3)
    cache.insert([1, 2, 3, 4, 5], "adapter-a", states([1, 2, 3, 4, 5]))
    assert cache.lookup([1, 2, 9, 9, 9], "adapter-a") is None  # 2 tokens: fewer than min_tokens
    assert cache.lookup([1, 2, 3, 4, 9], None) is None  # the base model's states are other states
    assert cache.lookup([1, 2, 3, 4, 9], "adapter-a") is not None
    cache.drop_scope("adapter-a")
    assert cache.lookup([1, 2, 3, 4, 9], "adapter-a") is None and cache.bytes == 0


def test_an_entry_that_begins_another_is_kept_only_once() -> None:
    cache = PrefixCache(1 << 20, min_tokens=1)
    cache.insert([1, 2, 3], None, states([1, 2, 3]))
    cache.insert([1, 2, 3, 4, 5], None, states([1, 2, 3, 4, 5]))  # the next turn: replaces its prompt
    assert len(cache) == 1
    cache.insert([1, 2], None, states([1, 2]))  # covered already
    assert len(cache) == 1
    found = cache.lookup([1, 2, 3, 4, 5, 6], None)
    assert found is not None and found.length == 5


def test_least_recently_used_entries_go_first_under_the_byte_budget() -> None:
    entry_bytes = 2 * LAYERS * 4 * 4 * 4  # (keys + values) x layers x 4 tokens x 4 floats x 4 bytes
    cache = PrefixCache(3 * entry_bytes, min_tokens=1)
    for first in (10, 20, 30):
        cache.insert([first, 1, 2, 3], None, states([first, 1, 2, 3]))
    assert cache.lookup([10, 1, 2, 3, 4], None) is not None  # 10 is now the most recently used
    cache.insert([40, 1, 2, 3], None, states([40, 1, 2, 3]))
    assert cache.bytes == 3 * entry_bytes
    assert cache.lookup([20, 1, 2, 3, 4], None) is None
    assert all(cache.lookup([f, 1, 2, 3, 4], None) is not None for f in (10, 30, 40))
    cache.insert(list(range(100)), None, states(list(range(100))))  # larger than the whole budget: not kept
    assert len(cache) == 3


def test_states_that_do_not_match_the_tokens_are_refused() -> None:
    cache = PrefixCache(1 << 20, min_tokens=1)
    cache.insert([1, 2, 3, 4], None, states([1, 2, 3]))
    assert len(cache) == 0
    with pytest.raises(ValueError):
        PrefixCache(0)


# ----------------------------------------------------------------- the engine, real model


def run_engine(base_model: tuple[Any, Any], prompts: list[list[int]], prefix_cache_mb: int) -> tuple[list, Any]:
    """Greedy answers to `prompts`, one after another (each may reuse the states of the ones before)."""
    from evolvable.policy_server.engine import Engine
    from evolvable.policy_server.sampling import SamplingParams

    model, tokenizer = base_model
    engine = Engine(model, tokenizer, max_batch=4, prefix_cache_mb=prefix_cache_mb).start()
    try:
        results = []
        for prompt in prompts:
            results.append(engine.generate_blocking(prompt, SamplingParams(max_tokens=12, temperature=0.0)))
        return results, engine.stats
    finally:
        engine.stop()


@pytest.mark.slow
def test_cached_prefixes_give_the_answers_of_a_full_prefill(base_model: tuple[Any, Any]) -> None:
    """A second agent request (same system prompt) and an episode's next turn reuse cached states, and
    their greedy tokens and logprobs are those of the engine without a cache."""
    _, tokenizer = base_model
    system = {"role": "system", "content": "You are a support agent for an online shop. " * 6}

    def chat(*messages: dict[str, str]) -> list[int]:
        return tokenizer.apply_chat_template([system, *messages], add_generation_prompt=True, return_dict=True)[
            "input_ids"
        ]

    first = chat({"role": "user", "content": "Where is my order 12345?"})
    plain, plain_stats = run_engine(base_model, [first], prefix_cache_mb=0)
    answer = plain[0].text
    prompts = [
        first,
        chat({"role": "user", "content": "Please reset my password."}),
        chat(
            {"role": "user", "content": "Where is my order 12345?"},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "It has not arrived yet."},
        ),
    ]
    uncached, uncached_stats = run_engine(base_model, prompts, prefix_cache_mb=0)
    cached, cached_stats = run_engine(base_model, prompts, prefix_cache_mb=64)
    assert uncached_stats.prefix_cache_hits == 0 and plain_stats.prefix_cache_hits == 0
    assert cached_stats.prefix_cache_hits == 2
    # the next turn reuses the system prompt, the first question and the answer, not only the system prompt
    assert cached_stats.prefix_cached_tokens > len(first) + len(chat()) - 4
    assert cached_stats.prefill_tokens + cached_stats.prefix_cached_tokens == uncached_stats.prefill_tokens
    for want, got in zip(uncached, cached, strict=True):
        assert got.token_ids == want.token_ids
        assert got.logprobs == pytest.approx(want.logprobs, abs=2e-3)


@pytest.mark.slow
def test_concurrent_requests_sharing_a_prefix_stay_apart(base_model: tuple[Any, Any]) -> None:
    """Rows built on the same cached states in one batch do not disturb each other or the cache."""
    from evolvable.policy_server.engine import Engine
    from evolvable.policy_server.sampling import SamplingParams

    model, tokenizer = base_model
    system = {"role": "system", "content": "Answer in one short sentence. " * 8}
    questions = ["Name a fruit.", "What is 2 + 2?", "Say hello in French.", "Name a colour."]
    prompts = [
        tokenizer.apply_chat_template(
            [system, {"role": "user", "content": q}], add_generation_prompt=True, return_dict=True
        )["input_ids"]
        for q in questions
    ]
    reference, _ = run_engine(base_model, prompts, prefix_cache_mb=0)
    engine = Engine(model, tokenizer, max_batch=4, prefix_cache_mb=64).start()
    try:
        engine.generate_blocking(prompts[0], SamplingParams(max_tokens=2, temperature=0.0))  # warm the cache
        results: list[Any] = [None] * len(prompts)

        def one(i: int) -> None:
            results[i] = engine.generate_blocking(prompts[i], SamplingParams(max_tokens=12, temperature=0.0))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert engine.stats.prefix_cache_hits >= len(prompts)
    finally:
        engine.stop()
    for want, got in zip(reference, results, strict=True):
        assert got.token_ids == want.token_ids
