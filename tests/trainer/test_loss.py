"""The decoupled PPO loss on tiny tensors whose values are computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from evolvable.trainer.loss import decoupled_ppo_loss, k3_kl, token_logprobs

LOG_HALF = math.log(0.5)


def t(*values: float) -> torch.Tensor:
    return torch.tensor([list(values)], dtype=torch.float32)


def loss_of(lp, prox, behave, adv, mask, **kw):
    return decoupled_ppo_loss(t(*lp), t(*prox), t(*behave), t(*adv), t(*mask), **kw)


def test_on_policy_token_is_minus_advantage() -> None:
    out = loss_of([LOG_HALF], [LOG_HALF], [LOG_HALF], [1.0], [1])
    assert out.loss.item() == pytest.approx(-1.0)
    assert out.clipped_tokens == 0 and out.capped_tokens == 0 and out.tokens == 1


def test_ratio_above_range_is_clipped_for_positive_advantage() -> None:
    # r = e^0.5 = 1.6487 > 1.2: min(1.6487 * 1, 1.2 * 1) = 1.2
    out = loss_of([0.5], [0.0], [0.0], [1.0], [1], clip_eps=0.2)
    assert out.loss.item() == pytest.approx(-1.2)
    assert out.clipped_tokens == 1


def test_ratio_above_range_is_not_clipped_for_negative_advantage() -> None:
    # min(-1.6487, -1.2) = -1.6487: the pessimistic unclipped term, so the loss is +1.6487
    out = loss_of([0.5], [0.0], [0.0], [-1.0], [1], clip_eps=0.2)
    assert out.loss.item() == pytest.approx(math.exp(0.5), rel=1e-5)
    assert out.clipped_tokens == 0


def test_asymmetric_clip_high() -> None:
    out = loss_of([0.5], [0.0], [0.0], [1.0], [1], clip_eps=0.2, clip_eps_high=0.28)
    assert out.loss.item() == pytest.approx(-1.28)


def test_behaviour_weight_scales_and_is_capped() -> None:
    # pi_prox / pi_behave = 2 -> weight 2
    out = loss_of([0.0], [0.0], [-math.log(2)], [1.0], [1], behaviour_cap=5.0)
    assert out.loss.item() == pytest.approx(-2.0)
    assert out.behaviour_weight_sum == pytest.approx(2.0)
    # ratio 10 is truncated at the cap of 5
    out = loss_of([0.0], [0.0], [-math.log(10)], [1.0], [1], behaviour_cap=5.0)
    assert out.loss.item() == pytest.approx(-5.0)
    assert out.capped_tokens == 1


def test_masked_tokens_contribute_nothing_to_loss_or_gradient() -> None:
    lp = torch.tensor([[LOG_HALF, 0.0]], requires_grad=True)
    base = decoupled_ppo_loss(
        lp[:, :1], torch.tensor([[LOG_HALF]]), torch.tensor([[LOG_HALF]]), torch.tensor([[1.0]]), torch.tensor([[1.0]])
    )
    # Second token: garbage that would be inf/NaN or dominate if it were not masked.
    out = decoupled_ppo_loss(
        lp,
        torch.tensor([[LOG_HALF, -100.0]]),
        torch.tensor([[LOG_HALF, -1000.0]]),
        torch.tensor([[1.0, 1e6]]),
        torch.tensor([[1.0, 0.0]]),
        ref_logprobs=torch.tensor([[LOG_HALF, 500.0]]),
        kl_coef=0.5,
    )
    assert out.loss.item() == pytest.approx(base.loss.item())
    out.loss.backward()
    assert lp.grad is not None
    assert lp.grad[0, 1].item() == 0.0
    assert lp.grad[0, 0].item() == pytest.approx(-1.0)  # d(-r*A)/d lp = -r*A = -1
    assert out.tokens == 1


def test_clipped_branch_has_no_gradient() -> None:
    lp = torch.tensor([[0.5]], requires_grad=True)
    out = decoupled_ppo_loss(lp, t(0.0), t(0.0), t(1.0), t(1))
    out.loss.backward()
    assert lp.grad is not None and lp.grad.item() == 0.0


def test_k3_kl_penalty_hand_computed() -> None:
    # pi = 0.5, ref = 0.25: delta = log(0.5); k3 = 0.5 - log(0.5) - 1 = 0.193147
    assert k3_kl(t(LOG_HALF), t(math.log(0.25))).item() == pytest.approx(0.5 + math.log(2) - 1)
    assert k3_kl(t(LOG_HALF), t(LOG_HALF)).item() == pytest.approx(0.0)
    out = loss_of([LOG_HALF], [LOG_HALF], [LOG_HALF], [1.0], [1], ref_logprobs=t(math.log(0.25)), kl_coef=0.1)
    assert out.loss.item() == pytest.approx(-1.0 + 0.1 * (0.5 + math.log(2) - 1), rel=1e-5)
    assert out.kl_ref_sum == pytest.approx(0.5 + math.log(2) - 1, rel=1e-5)
    # without a reference the coefficient is inert
    assert loss_of([LOG_HALF], [LOG_HALF], [LOG_HALF], [1.0], [1], kl_coef=0.1).loss.item() == pytest.approx(-1.0)


def test_token_level_normalisation_and_weights() -> None:
    # per-token losses -1 and -3 (on-policy, advantages 1 and 3)
    out = loss_of([0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 3.0], [1, 1])
    assert out.loss.item() == pytest.approx(-2.0)
    out = loss_of([0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 3.0], [1, 1], normaliser=4.0)
    assert out.loss.item() == pytest.approx(-1.0)
    out = loss_of([0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 3.0], [1, 1], token_weights=t(1.0, 0.5))
    assert out.loss.item() == pytest.approx((-1.0 - 1.5) / 2)
    # a long sequence counts per token: one 3-token sequence and one 1-token sequence in a batch
    lp = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, 0.0, 0.0]])
    out = decoupled_ppo_loss(lp, lp, lp, adv, mask)
    assert out.loss.item() == pytest.approx((-3.0 + 1.0) / 4)


def test_empty_mask_gives_zero_not_nan() -> None:
    out = loss_of([0.0], [0.0], [0.0], [1.0], [0])
    assert out.loss.item() == 0.0 and out.tokens == 0


def test_token_logprobs_aligned_with_input_ids() -> None:
    # vocab of 2; every position predicts token 1 with p = 0.75 (logits 0, log 3)
    logits = torch.tensor([[[0.0, math.log(3)]] * 3])
    ids = torch.tensor([[0, 1, 0]])
    out = token_logprobs(logits, ids)
    assert out.shape == (1, 3)
    assert out[0, 0].item() == 0.0  # nothing predicts the first token
    assert out[0, 1].item() == pytest.approx(math.log(0.75))
    assert out[0, 2].item() == pytest.approx(math.log(0.25))
    # temperature 2 flattens: logits 0, log(3)/2 -> p(1) = sqrt(3) / (1 + sqrt(3))
    hot = token_logprobs(logits, ids, temperature=2.0)
    assert hot[0, 1].item() == pytest.approx(math.log(math.sqrt(3) / (1 + math.sqrt(3))))
