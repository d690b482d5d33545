"""Per-request sampling parameters and the sampler.

Each request owns a `torch.Generator`, so a seeded request draws the same random numbers whatever else
shares its batch. By default the logprobs reported to clients are those of the raw model distribution
(temperature 1, no top-p), the quantity an RL trainer recomputes with a forward pass (vLLM's default
`raw_logprobs`); the engine's `logprobs_mode="processed"` reports the distribution actually sampled.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field

import torch

GREEDY_TEMPERATURE = 1e-5
"""Temperatures at or below this decode greedily (argmax), as `temperature=0` does in the OpenAI API."""


@dataclass
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    top_logprobs: int = 0
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature <= GREEDY_TEMPERATURE

    def make_generator(self) -> torch.Generator:
        generator = torch.Generator()
        generator.manual_seed(self.seed if self.seed is not None else secrets.randbits(63))
        return generator


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> tuple[int, float]:
    """Draw one token id from a 1-D row of logits under temperature and nucleus (top-p) filtering.

    Returns the token and its log-probability under the distribution it was actually drawn from
    (after temperature and top-p renormalisation; 0.0 for greedy, which is deterministic).
    """
    if params.greedy:
        return int(torch.argmax(logits)), 0.0
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, sorted_ids = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        keep = (cumulative - sorted_probs) < params.top_p  # always keeps the most likely token
        sorted_probs = torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs))
        choice = int(torch.multinomial(sorted_probs, 1, generator=generator))
        return int(sorted_ids[choice]), math.log(float(sorted_probs[choice] / sorted_probs.sum()))
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, math.log(float(probs[token]))
