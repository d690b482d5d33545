"""Stop strings and streaming hold-back, without a model."""

from __future__ import annotations

import pytest

from evolvable.policy_server.detokenize import find_stop, safe_text_end
from evolvable.policy_server.sampling import SamplingParams, sample_token


def test_find_stop_returns_the_earliest_stop() -> None:
    assert find_stop("abc END xyz STOP", ["STOP", "END"], 0) == (4, "END")
    assert find_stop("no stop here", ["STOP"], 0) is None
    assert find_stop("abcST", ["STOP"], 3) is None
    assert find_stop("abcSTOP", ["STOP"], 5) == (3, "STOP")  # a stop straddling the already-searched text


def test_safe_text_end_holds_back_possible_stop_prefixes_and_partial_characters() -> None:
    assert safe_text_end("hello wor", ["world!"]) == len("hello ")
    assert safe_text_end("hello", ["\n\n"]) == 5
    assert safe_text_end("line\n", ["\n\n"]) == 4
    assert safe_text_end("caf\ufffd", []) == 3


def test_greedy_and_seeded_sampling() -> None:
    import torch

    logits = torch.tensor([0.1, 3.0, 0.2, 2.9])
    assert sample_token(logits, SamplingParams(temperature=0), torch.Generator()) == (1, 0.0)
    draws = [sample_token(logits, SamplingParams(seed=5), SamplingParams(seed=5).make_generator())[0] for _ in range(3)]
    assert len(set(draws)) == 1
    nucleus = SamplingParams(temperature=1.0, top_p=0.01, seed=1)
    generator = nucleus.make_generator()
    assert {sample_token(logits, nucleus, generator) for _ in range(20)} == {(1, 0.0)}  # only one token survives
    token, logprob = sample_token(
        logits, SamplingParams(temperature=2.0, seed=3), SamplingParams(seed=3).make_generator()
    )
    assert logprob == pytest.approx(float(torch.log_softmax(logits / 2.0, dim=-1)[token]))
