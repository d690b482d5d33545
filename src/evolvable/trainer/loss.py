"""The RL objective: decoupled PPO with an optional k3 KL penalty, as pure tensor functions.

For every generated token t (loss mask 1), with
    r_t = pi_theta(t) / pi_prox(t)          the PPO ratio (gradient flows through pi_theta)
    w_t = min(pi_prox(t) / pi_behave(t), C) the decoupled behaviour correction (no gradient)
the per-token loss is
    l_t = -w_t * min(r_t * A_t, clip(r_t, 1 - eps_low, 1 + eps_high) * A_t)  +  beta * k3_t
    k3_t = exp(ref_t - theta_t) - (ref_t - theta_t) - 1                    (ref = the base model)
and the batch loss is sum_t(weight_t * l_t) / N, N = the number of generated tokens in the whole
optimizer step (token-level normalisation: long answers count per token, not per sequence).

pi_behave is the policy that sampled the data (recorded logprobs, possibly several versions old),
pi_prox a recent policy recomputed without gradient at the start of each PPO iteration (AReaL's
decoupled PPO), so the trust region is measured against a policy we can evaluate exactly, while
off-policy staleness is corrected by w_t.

Simplifications, stated:
- w_t is truncated at C (clamped, not masked out); tokens beyond the cap still learn, at weight C.
- No dual clip, no value function, no entropy bonus; advantages come from outside (advantages.py).
- The KL term uses the k3 estimator on sampled tokens only (unbiased for KL(pi_theta || pi_ref)
  in expectation under pi_theta; here the data comes from pi_behave, which we ignore for the KL).
- `approx_kl` reported is k3 between pi_prox and pi_theta on generated tokens: a diagnostic only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["LossOutput", "decoupled_ppo_loss", "k3_kl", "token_logprobs"]


@dataclass
class LossOutput:
    """The loss to backpropagate and detached diagnostics (sums, so they aggregate across micro-batches)."""

    loss: torch.Tensor
    policy_loss_sum: float
    kl_ref_sum: float
    clipped_tokens: float
    capped_tokens: float
    approx_kl_sum: float
    behaviour_weight_sum: float
    tokens: float


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Logprob of each token given the tokens before it, aligned with input_ids (position 0 gets 0).

    logits: [B, T, V] from a causal LM on input_ids [B, T]. Uses gather - logsumexp so no second
    [B, T, V] tensor (log_softmax) is materialised.
    """
    shifted = logits[:, :-1, :].float()
    if temperature != 1.0:
        shifted = shifted / temperature
    targets = input_ids[:, 1:].unsqueeze(-1)
    picked = torch.gather(shifted, -1, targets).squeeze(-1) - torch.logsumexp(shifted, dim=-1)
    return torch.nn.functional.pad(picked, (1, 0), value=0.0)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref): exp(ref - lp) - (ref - lp) - 1 (always >= 0)."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1.0


def decoupled_ppo_loss(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    behaviour_cap: float = 5.0,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    token_weights: torch.Tensor | None = None,
    normaliser: float | torch.Tensor | None = None,
) -> LossOutput:
    """Decoupled PPO loss over [B, T] tensors (see the module docstring for the formula).

    loss_mask is 1 on generated tokens; other tokens contribute nothing (not even NaN/inf from
    their logprob columns). token_weights (e.g. staleness down-weighting) scale each token's loss.
    normaliser defaults to the number of masked tokens in this call; pass the optimizer step's
    total when accumulating over micro-batches or processes.
    """
    mask = loss_mask.to(logprobs.dtype)
    active = mask > 0
    weights = mask if token_weights is None else mask * token_weights.to(logprobs.dtype)
    zeros = torch.zeros_like(logprobs)
    # Masked positions are replaced before exp() so garbage there cannot produce inf * 0 = NaN.
    log_ratio = torch.where(active, logprobs - proximal_logprobs.detach(), zeros)
    ratio = torch.exp(log_ratio)
    behaviour_log_ratio = torch.where(active, proximal_logprobs - behaviour_logprobs, zeros).detach()
    behaviour_weight = torch.exp(behaviour_log_ratio).clamp(max=behaviour_cap)
    adv = torch.where(active, advantages.to(logprobs.dtype), zeros)

    high = clip_eps if clip_eps_high is None else clip_eps_high
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + high) * adv
    per_token = -behaviour_weight * torch.minimum(unclipped, clipped)

    kl_ref = zeros
    if ref_logprobs is not None and kl_coef != 0.0:
        # Same trick: where() after exp() would still send NaN gradients through masked positions.
        kl_ref = k3_kl(torch.where(active, logprobs, zeros), torch.where(active, ref_logprobs.detach(), zeros))
        per_token = per_token + kl_coef * kl_ref

    n_tokens = mask.sum()
    denominator = n_tokens if normaliser is None else torch.as_tensor(normaliser, dtype=logprobs.dtype)
    denominator = torch.clamp(denominator, min=1.0)
    loss = (per_token * weights).sum() / denominator

    with torch.no_grad():
        was_clipped = (clipped < unclipped) & active  # min() picked the clipped branch
        capped = (torch.exp(behaviour_log_ratio) > behaviour_cap) & active
        approx_kl = k3_kl(zeros, -log_ratio.detach())  # k3 with ref = pi_prox; log_ratio is 0 where masked
        return LossOutput(
            loss=loss,
            policy_loss_sum=float((per_token.detach() - kl_coef * kl_ref.detach()).mul(mask).sum()),
            kl_ref_sum=float(kl_ref.detach().mul(mask).sum()),
            clipped_tokens=float(was_clipped.sum()),
            capped_tokens=float(capped.sum()),
            approx_kl_sum=float(approx_kl.mul(mask).sum()),
            behaviour_weight_sum=float(behaviour_weight.mul(mask).sum()),
            tokens=float(n_tokens),
        )
