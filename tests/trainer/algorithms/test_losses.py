"""Hand-computed per-token losses and gradients. ∂ℓ/∂log π is what the optimizer sees, so it is checked directly."""

import math

import pytest
import torch

from trainer.algorithms import AlgorithmConfig, bernoulli_kl, off_policy_correction, policy_loss, token_weights
from trainer.algorithms.losses import (
    PolicyLossInputs,
    dppo_binary_kl_loss,
    dppo_binary_tv_loss,
    glm5_loss,
    ppo_clip_loss,
)

F64 = torch.float64


def row(*values: float) -> torch.Tensor:
    return torch.tensor([values], dtype=F64)


def log_row(*probs: float) -> torch.Tensor:
    return row(*probs).log()


def loss_and_grad(config, logprobs, rollout, advantages, old=None, mask=None, weights=None):
    """Σ_t ℓ_t (weights 1 unless given) and ∂/∂log π_t of it."""
    logprobs = logprobs.clone().requires_grad_(True)
    mask = torch.ones_like(logprobs, dtype=torch.bool) if mask is None else mask
    weights = mask.to(F64) if weights is None else weights
    loss, metrics = policy_loss(logprobs, rollout, advantages, mask, weights, config, old_logprobs_BT=old)
    loss.backward()
    return loss.item(), logprobs.grad, metrics


def test_ppo_clip():
    # π_old = 0.4 everywhere, ε = 0.2 / 0.2, r = π / 0.4:
    #   r = 1.5, A =  1: −min(1.5, 1.2)   = −1.2  clipped  ∂ = 0
    #   r = 0.5, A =  1: −min(0.5, 0.8)   = −0.5           ∂ = −r·A = −0.5
    #   r = 0.5, A = −1: −min(−0.5, −0.8) =  0.8  clipped  ∂ = 0
    #   r = 1.5, A = −1: −min(−1.5, −1.2) =  1.5           ∂ = −r·A = 1.5
    #   r = 1.1, A =  2: −min(2.2, 2.2)   = −2.2           ∂ = −2.2
    config = AlgorithmConfig(policy_loss="ppo_clip")
    old = log_row(0.4, 0.4, 0.4, 0.4, 0.4)
    logprobs = log_row(0.6, 0.2, 0.2, 0.6, 0.44)
    advantages = row(1, 1, -1, -1, 2)
    terms = ppo_clip_loss(PolicyLossInputs(logprobs, old, advantages, old), config)
    torch.testing.assert_close(terms.loss_BT, row(-1.2, -0.5, 0.8, 1.5, -2.2))
    loss, grad, metrics = loss_and_grad(config, logprobs, rollout=old, advantages=advantages, old=old)
    assert loss == pytest.approx(-1.2 - 0.5 + 0.8 + 1.5 - 2.2)
    torch.testing.assert_close(grad, row(0, -0.5, 0, 1.5, -2.2))
    assert metrics["ppo_clipped"] == pytest.approx(2 / 5)


def test_ppo_clip_needs_old_logprobs():
    with pytest.raises(ValueError, match="'ppo_clip' needs old_logprobs_BT"):
        loss_and_grad(AlgorithmConfig(policy_loss="ppo_clip"), row(-1.0), row(-1.0), row(1.0))


def test_glm5():
    # ε_low 0.5, ε_high 4 → keep iff 0.5 < r < 5, r = π/μ; ℓ = −sg(keep·r)·A·log π, ∂ = −keep·r·A
    #   π 0.2 / μ 0.5  → r 0.4: dropped        ℓ = 0                              ∂ = 0
    #   π 0.5 / μ 0.25 → r 2,  A =  1:         ℓ = −2·1·ln 0.5 = 1.3862944        ∂ = −2
    #   π 0.6 / μ 0.1  → r 6:  dropped         ℓ = 0                              ∂ = 0
    #   π 0.4 / μ 0.5  → r 0.8, A = −0.5:      ℓ = −0.8·(−0.5)·ln 0.4 = −0.3665163 ∂ = 0.4
    config = AlgorithmConfig(policy_loss="glm5")
    logprobs, rollout = log_row(0.2, 0.5, 0.6, 0.4), log_row(0.5, 0.25, 0.1, 0.5)
    advantages = row(1, 1, 1, -0.5)
    terms = glm5_loss(PolicyLossInputs(logprobs, rollout, advantages, None), config)
    torch.testing.assert_close(terms.loss_BT, row(0, 1.3862944, 0, -0.3665163))
    loss, grad, metrics = loss_and_grad(config, logprobs, rollout, advantages)
    assert loss == pytest.approx(1.3862944 - 0.3665163)
    torch.testing.assert_close(grad, row(0, -2, 0, 0.4))
    assert metrics["glm5_masked"] == pytest.approx(2 / 4)


def test_dppo_binary_tv():
    # δ 0.15 / 0.15, Δ = π − μ, ℓ = −keep·r·A, ∂ = −keep·r·A
    #   π 0.5 μ 0.3 A =  1: Δ  0.2 > 0.15 with A > 0 → masked    ℓ = 0      ∂ = 0
    #   π 0.4 μ 0.3 A =  1: Δ  0.1 → kept, r 4/3                 ℓ = −4/3   ∂ = −4/3
    #   π 0.1 μ 0.3 A = −1: −Δ 0.2 > 0.15 with A < 0 → masked    ℓ = 0      ∂ = 0
    #   π 0.5 μ 0.3 A = −1: Δ  0.2 but A < 0 → kept, r 5/3       ℓ = 5/3    ∂ = 5/3
    #   π 0.2 μ 0.3 A =  2: Δ −0.1 but A > 0 → kept, r 2/3       ℓ = −4/3   ∂ = −4/3
    config = AlgorithmConfig(policy_loss="dppo_binary_tv")
    logprobs, rollout = log_row(0.5, 0.4, 0.1, 0.5, 0.2), log_row(0.3, 0.3, 0.3, 0.3, 0.3)
    advantages = row(1, 1, -1, -1, 2)
    terms = dppo_binary_tv_loss(PolicyLossInputs(logprobs, rollout, advantages, None), config)
    torch.testing.assert_close(terms.loss_BT, row(0, -4 / 3, 0, 5 / 3, -4 / 3))
    loss, grad, metrics = loss_and_grad(config, logprobs, rollout, advantages)
    assert loss == pytest.approx(-4 / 3 + 5 / 3 - 4 / 3)
    torch.testing.assert_close(grad, row(0, -4 / 3, 0, 5 / 3, -4 / 3))
    assert metrics["dppo_masked"] == pytest.approx(2 / 5)


def test_bernoulli_kl():
    # KL(0.3 ‖ 0.5) = 0.3 ln(0.3/0.5) + 0.7 ln(0.7/0.5) = −0.1532477 + 0.2355306 = 0.0822829
    # KL(0.3 ‖ 0.35) = 0.3 ln(0.3/0.35) + 0.7 ln(0.7/0.65) = −0.0462452 + 0.0518756 = 0.0056304
    # KL(0.5 ‖ 0.2) = 0.5 ln 2.5 + 0.5 ln(0.5/0.8) = 0.4581454 − 0.2350018 = 0.2231436
    got = bernoulli_kl(row(0.3, 0.3, 0.5), row(0.5, 0.35, 0.2))
    torch.testing.assert_close(got, row(0.0822829, 0.0056304, 0.2231436))


def test_dppo_binary_kl():
    # δ 0.05 / 0.05 nats; masked when the update moves p in A's direction and the Bernoulli KL exceeds δ:
    #   π 0.5  μ 0.3 A =  1: Δ > 0, KL 0.0823 > 0.05 → masked        ℓ = 0     ∂ = 0
    #   π 0.5  μ 0.3 A = −1: Δ > 0 but A < 0 → kept, r 5/3           ℓ = 5/3   ∂ = 5/3
    #   π 0.35 μ 0.3 A =  1: KL 0.0056 ≤ 0.05 → kept, r 7/6          ℓ = −7/6  ∂ = −7/6
    #   π 0.2  μ 0.5 A = −1: Δ < 0, KL 0.2231 > 0.05 → masked        ℓ = 0     ∂ = 0
    config = AlgorithmConfig(policy_loss="dppo_binary_kl", dppo_delta_low=0.05, dppo_delta_high=0.05)
    logprobs, rollout = log_row(0.5, 0.5, 0.35, 0.2), log_row(0.3, 0.3, 0.3, 0.5)
    advantages = row(1, -1, 1, -1)
    terms = dppo_binary_kl_loss(PolicyLossInputs(logprobs, rollout, advantages, None), config)
    torch.testing.assert_close(terms.loss_BT, row(0, 5 / 3, -7 / 6, 0))
    loss, grad, metrics = loss_and_grad(config, logprobs, rollout, advantages)
    assert loss == pytest.approx(5 / 3 - 7 / 6)
    torch.testing.assert_close(grad, row(0, 5 / 3, -7 / 6, 0))
    assert metrics["dppo_masked"] == pytest.approx(2 / 4)
    # With the hero δ = 0.15 the first token (KL 0.0823) is kept: ℓ = −5/3.
    loss, grad, _ = loss_and_grad(AlgorithmConfig(policy_loss="dppo_binary_kl"), logprobs, rollout, advantages)
    torch.testing.assert_close(grad, row(-5 / 3, 5 / 3, -7 / 6, 0))


def test_hero_loss_end_to_end_with_prompt_mean():
    # Two groups: a = sequence 0 (2 tokens), b = sequence 1 (1 token). π = μ so r = 1 and nothing is masked.
    # prompt_mean weights: a → 1/(2·2) = 1/4 per token, b → 1/(2·1) = 1/2.
    # A = [1, -2]: loss = −(1/4·1 + 1/4·1) − (1/2·(−2)) = −0.5 + 1 = 0.5; ∂ = −w·r·A = [[−1/4, −1/4], [1, 0]]
    mask = torch.tensor([[1, 1], [1, 0]])
    logprobs = torch.log(torch.tensor([[0.5, 0.2], [0.7, 0.9]], dtype=F64))
    advantages = torch.tensor([[1.0, 1.0], [-2.0, 0.0]], dtype=F64)
    weights = token_weights(mask, ["a", "b"], "prompt_mean").to(F64)
    loss, grad, metrics = loss_and_grad(AlgorithmConfig(), logprobs, logprobs, advantages, mask=mask, weights=weights)
    assert loss == pytest.approx(0.5)
    torch.testing.assert_close(grad, torch.tensor([[-0.25, -0.25], [1.0, 0.0]], dtype=F64))
    assert metrics == {"dppo_masked": 0.0, "logprob_abs_diff": 0.0, "ratio_abs_dev": 0.0, "loss_tokens": 3.0}


def test_ratio_abs_dev_is_the_mean_distance_of_pi_over_mu_from_1_over_loss_tokens():
    # π/μ = 0.5/0.25 = 2 and 0.2/0.4 = 0.5 on the loss tokens: (|2 − 1| + |0.5 − 1|) / 2 = 0.75; the third token is
    # outside the mask (π/μ = 9 there would count 8)
    logprobs, rollout = log_row(0.5, 0.2, 0.9), log_row(0.25, 0.4, 0.1)
    mask = torch.tensor([[True, True, False]])
    _, _, metrics = loss_and_grad(AlgorithmConfig(policy_loss="glm5"), logprobs, rollout, row(1, 1, 1), mask=mask)
    assert metrics["ratio_abs_dev"] == pytest.approx(0.75)


def test_token_tis_caps_each_token():
    # π_old/μ = [3, 0.5] → c = [min(3, 2), 0.5] = [2, 0.5]
    config = AlgorithmConfig(policy_loss="ppo_clip", tis_mode="token")
    old, rollout = log_row(0.6, 0.1), log_row(0.2, 0.2)
    mask = torch.ones(1, 2, dtype=torch.bool)
    correction, flags = off_policy_correction(old, rollout, mask, config)
    torch.testing.assert_close(correction, row(2, 0.5))
    assert flags["tis_capped"].tolist() == [[True, False]]
    # PPO with π = π_old (r = 1, no clip), A = 1: ℓ = [−1, −1] → loss = −(2 + 0.5), ∂ = −c·r·A = [−2, −0.5]
    loss, grad, metrics = loss_and_grad(config, old, rollout, row(1, 1), old=old)
    assert loss == pytest.approx(-2.5)
    torch.testing.assert_close(grad, row(-2, -0.5))
    assert metrics["tis_capped"] == pytest.approx(0.5)


def test_sequence_tis_caps_the_product():
    # row 0: π_old/μ = 2, 2 → Π = 4 < 5 → c = 4 on both tokens; row 1: 3, 3 → Π = 9 → capped at 5
    config = AlgorithmConfig(policy_loss="ppo_clip", tis_mode="sequence")
    old = torch.log(torch.tensor([[0.4, 0.4], [0.6, 0.6]], dtype=F64))
    rollout = torch.full((2, 2), math.log(0.2), dtype=F64)
    correction, flags = off_policy_correction(old, rollout, torch.ones(2, 2, dtype=torch.bool), config)
    torch.testing.assert_close(correction, torch.tensor([[4.0, 4.0], [5.0, 5.0]], dtype=F64))
    assert flags["tis_capped"].tolist() == [[False, False], [True, True]]


def test_geometric_sequence_mask():
    # per-token log(π_old/μ): row 0 all +0.005 → exp(0.005) = 1.005 ∈ [0.99, 1.01] kept;
    # row 1 all +0.02 → 1.0202 dropped; row 2 +0.03 / −0.03 → geometric mean exp(0) = 1 kept (per-token ratios
    # outside the band do not matter); row 3 −0.05 on its one loss token (second is masked) → 0.951 dropped
    config = AlgorithmConfig(policy_loss="dppo_binary_tv", geometric_mask=True)
    log_ratio = torch.tensor([[0.005, 0.005], [0.02, 0.02], [0.03, -0.03], [-0.05, 9.0]], dtype=F64)
    rollout = torch.full((4, 2), -1.0, dtype=F64)
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]], dtype=torch.bool)
    correction, flags = off_policy_correction(rollout + log_ratio, rollout, mask, config)
    torch.testing.assert_close(correction, torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]], dtype=F64))
    assert flags["geometric_masked"][:, 0].tolist() == [False, True, False, True]
    # In policy_loss π_old defaults to sg(π): the dropped rows get zero gradient.
    _, grad, metrics = loss_and_grad(config, rollout + log_ratio, rollout, torch.ones(4, 2, dtype=F64), mask=mask)
    assert (grad[1] == 0).all() and (grad[3] == 0).all() and (grad[0] != 0).all()
    assert metrics["geometric_masked"] == pytest.approx(3 / 7)


def test_shape_mismatch_is_named():
    with pytest.raises(ValueError, match=r"advantages_BT has shape \(1, 3\), logprobs_BT has \(1, 2\)"):
        loss_and_grad(AlgorithmConfig(), row(-1.0, -1.0), row(-1.0, -1.0), row(1.0, 1.0, 1.0))
