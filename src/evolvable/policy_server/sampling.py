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


def sample_rows_on_device(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]
) -> list[tuple[int, float, float, list[tuple[int, float]]]]:
    """Draw one token for every row of a 2-D batch of logits on its own device, in a few batched kernels.

    For each row: (token, log-probability under the distribution it was drawn from, raw log-probability
    at temperature 1, the raw top `top_logprobs`). Sampled rows use inverse-CDF sampling over the
    probabilities sorted high to low (top-p applied), with one uniform number drawn from the row's own
    generator, so a seeded request draws the same tokens whatever shares its batch (up to float rounding).
    The draws differ from `sample_token`'s: this is the accelerator path, where per-row calls would each
    wait for the device.
    """
    rows, vocabulary = logits.shape
    device = logits.device
    raw = torch.log_softmax(logits.float(), dim=-1)
    tokens = torch.argmax(logits, dim=-1)
    processed = torch.zeros(rows, dtype=torch.float32, device=device)
    sampled = [i for i, p in enumerate(params) if not p.greedy]
    if sampled:
        index = torch.tensor(sampled, dtype=torch.long, device=device)
        temperature = torch.tensor([params[i].temperature for i in sampled], device=device).unsqueeze(1)
        top_p = torch.tensor([params[i].top_p for i in sampled], device=device).unsqueeze(1)
        uniform = torch.cat([torch.rand(1, generator=generators[i]) for i in sampled]).to(device)
        probs = torch.softmax(logits[index].float() / temperature, dim=-1)
        sorted_probs, sorted_ids = torch.sort(probs, dim=-1, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        keep = (cumulative - sorted_probs) < top_p  # always keeps the most likely token
        sorted_probs = torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs))
        cdf = torch.cumsum(sorted_probs, dim=-1)
        total = cdf[:, -1:]
        # The first position whose cumulative mass exceeds u * total: never a zero-probability one.
        choice = torch.searchsorted(cdf, uniform.unsqueeze(1) * total, right=True).clamp_(max=vocabulary - 1)
        tokens[index] = sorted_ids.gather(1, choice).squeeze(1)
        processed[index] = torch.log(sorted_probs.gather(1, choice).squeeze(1) / total.squeeze(1))
    raw_picked = raw.gather(1, tokens.unsqueeze(1)).squeeze(1)
    top_k = max(p.top_logprobs for p in params)
    top_values = top_ids = None
    if top_k > 0:
        top_values, top_ids = torch.topk(raw, top_k, dim=-1)
    host_tokens = tokens.tolist()  # the one wait for the device
    host_processed, host_raw = processed.tolist(), raw_picked.tolist()
    host_top_ids = top_ids.tolist() if top_ids is not None else None
    host_top_values = top_values.tolist() if top_values is not None else None
    draws: list[tuple[int, float, float, list[tuple[int, float]]]] = []
    for row, row_params in enumerate(params):
        top: list[tuple[int, float]] = []
        if row_params.top_logprobs > 0 and host_top_ids is not None and host_top_values is not None:
            k = row_params.top_logprobs
            top = list(zip(host_top_ids[row][:k], host_top_values[row][:k], strict=True))
        draws.append((host_tokens[row], host_processed[row], host_raw[row], top))
    return draws
