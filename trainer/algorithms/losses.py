"""Per-token policy-gradient losses, off-policy corrections and the single entry point ``policy_loss``.

Notation (shared/RECIPE.md): π the policy being trained (``logprobs_BT``, differentiable), μ the rollout/inference
policy (``rollout_logprobs_BT``, from the engine), π_old the policy before this optimizer step
(``old_logprobs_BT``, an extra forward pass only PPO clip needs), A the advantage, sg stop-gradient.

Each registered loss returns ℓ_BT, the per-token loss, and boolean per-token flags (clipped / masked tokens);
``policy_loss`` multiplies ℓ by the aggregation weights (``aggregation.token_weights``) and by the stop-gradient
off-policy correction, sums over loss-masked tokens and turns the flags into fractions of loss tokens.

Log ratios are clamped to [−20, 20] before ``exp`` so a wild token cannot overflow to inf (as verl/SkyRL do).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainer.algorithms.config import AlgorithmConfig, PolicyLoss, TisMode
from trainer.algorithms.registry import Registry

LOG_RATIO_CLAMP = 20.0
# Bernoulli KL needs p ∈ (0, 1); sampled-token probabilities can round to exactly 0 or 1 in float32.
PROB_CLAMP = 1e-7


@dataclass(frozen=True)
class PolicyLossInputs:
    """Per-token tensors of shape (B, T), already zeroed outside the loss mask."""

    logprobs_BT: torch.Tensor
    rollout_logprobs_BT: torch.Tensor
    advantages_BT: torch.Tensor
    old_logprobs_BT: torch.Tensor | None


@dataclass(frozen=True)
class PolicyLossTerms:
    """ℓ_BT and named boolean flags (reported as the fraction of loss tokens where they are true)."""

    loss_BT: torch.Tensor
    flags_BT: dict[str, torch.Tensor]


PolicyLossFn = Callable[[PolicyLossInputs, AlgorithmConfig], PolicyLossTerms]
POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")


def _ratio(logp_BT: torch.Tensor, logq_BT: torch.Tensor) -> torch.Tensor:
    """p/q = exp(log p − log q), log ratio clamped to ±20."""
    return torch.exp((logp_BT - logq_BT).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


@POLICY_LOSSES.register(PolicyLoss.PPO_CLIP)
def ppo_clip_loss(inputs: PolicyLossInputs, config: AlgorithmConfig) -> PolicyLossTerms:
    """PPO clip (Schulman et al., arXiv 1707.06347; asymmetric ε as in DAPO, arXiv 2503.14476).

    ℓ = −min(r·A, clip(r, 1 − ε_low, 1 + ε_high)·A), r = π/π_old. Flag ``ppo_clipped``: the clipped branch is
    the smaller one, so the token gets no gradient.
    """
    if inputs.old_logprobs_BT is None:
        raise ValueError("policy_loss 'ppo_clip' needs old_logprobs_BT (π_old from a forward pass before the update)")
    ratio_BT = _ratio(inputs.logprobs_BT, inputs.old_logprobs_BT)
    unclipped_BT = ratio_BT * inputs.advantages_BT
    clipped_BT = ratio_BT.clamp(1 - config.ppo_eps_low, 1 + config.ppo_eps_high) * inputs.advantages_BT
    return PolicyLossTerms(
        loss_BT=-torch.minimum(unclipped_BT, clipped_BT),
        flags_BT={"ppo_clipped": (clipped_BT < unclipped_BT).detach()},
    )


@POLICY_LOSSES.register(PolicyLoss.GLM5)
def glm5_loss(inputs: PolicyLossInputs, config: AlgorithmConfig) -> PolicyLossTerms:
    """GLM-5 truncated importance-ratio loss ("rollout_is"; "GLM-5: from Vibe Coding to Agentic Engineering").

    r = π/μ; keep = 1 if 1 − ε_low < r < 1 + ε_high else 0 (a hard zero, not a clamp);
    ℓ = −sg(keep·r)·A·log π, so ∂ℓ/∂log π = −keep·r·A. Recipe ε_low 0.5, ε_high 4. Flag ``glm5_masked``: keep = 0.
    """
    ratio_BT = _ratio(inputs.logprobs_BT, inputs.rollout_logprobs_BT).detach()
    keep_BT = (ratio_BT > 1 - config.glm5_eps_low) & (ratio_BT < 1 + config.glm5_eps_high)
    return PolicyLossTerms(
        loss_BT=-(ratio_BT * keep_BT) * inputs.advantages_BT * inputs.logprobs_BT,
        flags_BT={"glm5_masked": ~keep_BT},
    )


def _dppo_loss(inputs: PolicyLossInputs, masked_BT: torch.Tensor, flag: str) -> PolicyLossTerms:
    """ℓ = −(1 − masked)·r·A with r = π/μ differentiable (∂ℓ/∂log π = −(1 − masked)·r·A)."""
    ratio_BT = _ratio(inputs.logprobs_BT, inputs.rollout_logprobs_BT)
    return PolicyLossTerms(loss_BT=-ratio_BT * inputs.advantages_BT * ~masked_BT, flags_BT={flag: masked_BT})


@POLICY_LOSSES.register(PolicyLoss.DPPO_BINARY_TV)
def dppo_binary_tv_loss(inputs: PolicyLossInputs, config: AlgorithmConfig) -> PolicyLossTerms:
    """DPPO binary total-variation mask (Divergence PPO, arXiv 2602.04879).

    Δ = p_π − p_μ on the sampled token's probability (not the ratio);
    masked if (A > 0 and Δ > δ_high) or (A < 0 and −Δ > δ_low); ℓ = −(1 − masked)·r·A, r = π/μ.
    The trust region is enforced only in the direction the advantage pushes; no π_old forward pass is needed.
    """
    delta_BT = (inputs.logprobs_BT.exp() - inputs.rollout_logprobs_BT.exp()).detach()
    advantages_BT = inputs.advantages_BT
    masked_BT = ((advantages_BT > 0) & (delta_BT > config.dppo_delta_high)) | (
        (advantages_BT < 0) & (-delta_BT > config.dppo_delta_low)
    )
    return _dppo_loss(inputs, masked_BT, "dppo_masked")


def bernoulli_kl(p_mu_BT: torch.Tensor, p_pi_BT: torch.Tensor) -> torch.Tensor:
    """KL(Bern(p_μ) ‖ Bern(p_π)) = p_μ·log(p_μ/p_π) + (1 − p_μ)·log((1 − p_μ)/(1 − p_π)), p clamped to (0, 1)."""
    p_mu_BT = p_mu_BT.clamp(PROB_CLAMP, 1 - PROB_CLAMP)
    p_pi_BT = p_pi_BT.clamp(PROB_CLAMP, 1 - PROB_CLAMP)
    return p_mu_BT * torch.log(p_mu_BT / p_pi_BT) + (1 - p_mu_BT) * torch.log((1 - p_mu_BT) / (1 - p_pi_BT))


@POLICY_LOSSES.register(PolicyLoss.DPPO_BINARY_KL)
def dppo_binary_kl_loss(inputs: PolicyLossInputs, config: AlgorithmConfig) -> PolicyLossTerms:
    """DPPO binary-KL mask (arXiv 2602.04879): the binary-TV rule with the divergence D = KL(Bern(p_μ) ‖ Bern(p_π)).

    Δ = p_π − p_μ gives the direction: masked if (A > 0 and Δ > 0 and D > δ_high) or (A < 0 and Δ < 0 and
    D > δ_low); ℓ = −(1 − masked)·r·A, r = π/μ. δ is in nats here.
    """
    p_pi_BT = inputs.logprobs_BT.exp().detach()
    p_mu_BT = inputs.rollout_logprobs_BT.exp()
    delta_BT = p_pi_BT - p_mu_BT
    divergence_BT = bernoulli_kl(p_mu_BT, p_pi_BT)
    advantages_BT = inputs.advantages_BT
    masked_BT = ((advantages_BT > 0) & (delta_BT > 0) & (divergence_BT > config.dppo_delta_high)) | (
        (advantages_BT < 0) & (delta_BT < 0) & (divergence_BT > config.dppo_delta_low)
    )
    return _dppo_loss(inputs, masked_BT, "dppo_masked")


def off_policy_correction(
    old_logprobs_BT: torch.Tensor, rollout_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor, config: AlgorithmConfig
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Stop-gradient factor c_BT multiplying ℓ for the π_old ≠ μ mismatch, and its per-token flags.

    * TIS per token (Yao et al., "Your efficient RL framework secretly brings you off-policy RL training", 2025):
      c = min(π_old/μ, C_token).
    * TIS per sequence: c_i = min(Π_t π_old/μ, C_sequence) = min(exp(Σ_t log(π_old/μ)), C_sequence).
    * Geometric sequence mask: c_i = 0 when exp(mean_t log(π_old/μ)) ∉ [low, high] (means over loss tokens).
    """
    log_ratio_BT = torch.where(mask_BT, old_logprobs_BT - rollout_logprobs_BT, 0.0).detach()
    correction_BT = torch.ones_like(log_ratio_BT)
    flags_BT: dict[str, torch.Tensor] = {}
    if config.tis_mode == TisMode.TOKEN:
        cap_log = math.log(config.tis_token_cap)
        correction_BT = correction_BT * log_ratio_BT.clamp(max=cap_log).exp()
        flags_BT["tis_capped"] = log_ratio_BT > cap_log
    elif config.tis_mode == TisMode.SEQUENCE:
        cap_log = math.log(config.tis_sequence_cap)
        sequence_log_B = log_ratio_BT.sum(dim=1)
        correction_BT = correction_BT * sequence_log_B.clamp(max=cap_log).exp()[:, None]
        flags_BT["tis_capped"] = (sequence_log_B > cap_log)[:, None].expand_as(mask_BT)
    if config.geometric_mask:
        geometric_B = torch.exp(log_ratio_BT.sum(dim=1) / mask_BT.sum(dim=1).clamp(min=1))
        outside_B = (geometric_B < config.geometric_mask_low) | (geometric_B > config.geometric_mask_high)
        correction_BT = correction_BT * (~outside_B)[:, None]
        flags_BT["geometric_masked"] = outside_B[:, None].expand_as(mask_BT)
    return correction_BT, flags_BT


def policy_loss(
    logprobs_BT: torch.Tensor,
    rollout_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    loss_mask_BT: torch.Tensor,
    weights_BT: torch.Tensor,
    config: AlgorithmConfig,
    old_logprobs_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Aggregated policy loss Σ_{loss tokens} w·ℓ·c of one (micro-)batch, and its metrics.

    ``weights_BT`` come from ``aggregation.token_weights`` over the whole mini-batch (sliced to this micro-batch),
    so summing the returned losses over micro-batches gives the mini-batch loss. ℓ is the configured loss, c the
    off-policy correction (1 unless TIS or the geometric mask is on); c uses π_old, which defaults to sg(π) when
    ``old_logprobs_BT`` is None (one optimizer step per batch: π_old = π). Tokens outside ``loss_mask_BT`` are
    replaced by zeros before any arithmetic, so their values reach neither the loss nor the gradient.

    Metrics: the fraction of loss tokens under each flag (e.g. ``dppo_masked``, ``ppo_clipped``, ``tis_capped``),
    ``logprob_abs_diff`` = mean |log π − log μ| (the recipe's train–inference health check, < 0.03),
    ``ratio_abs_dev`` = mean |π/μ − 1| with π/μ = exp(log π − log μ) (log ratio clamped to ±20: how far off-policy
    the tokens are, what DPPO's mask and TIS act on) and ``loss_tokens``, the count to weight per-micro-batch metrics
    by.
    """
    tensors = {"rollout_logprobs_BT": rollout_logprobs_BT, "advantages_BT": advantages_BT}
    tensors |= {"loss_mask_BT": loss_mask_BT, "weights_BT": weights_BT}
    if old_logprobs_BT is not None:
        tensors["old_logprobs_BT"] = old_logprobs_BT
    for name, tensor in tensors.items():
        if tensor.shape != logprobs_BT.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, logprobs_BT has {tuple(logprobs_BT.shape)}")
    if logprobs_BT.dim() != 2:
        raise ValueError(f"logprobs_BT must be 2-D (B, T), got shape {tuple(logprobs_BT.shape)}")

    mask_BT = loss_mask_BT.bool()

    def masked(values_BT: torch.Tensor) -> torch.Tensor:
        return torch.where(mask_BT, values_BT, torch.zeros((), dtype=values_BT.dtype, device=values_BT.device))

    inputs = PolicyLossInputs(
        logprobs_BT=masked(logprobs_BT),
        rollout_logprobs_BT=masked(rollout_logprobs_BT),
        advantages_BT=masked(advantages_BT),
        old_logprobs_BT=None if old_logprobs_BT is None else masked(old_logprobs_BT),
    )
    terms = POLICY_LOSSES.get(config.policy_loss)(inputs, config)
    old_for_correction_BT = inputs.logprobs_BT.detach() if inputs.old_logprobs_BT is None else inputs.old_logprobs_BT
    correction_BT, correction_flags_BT = off_policy_correction(
        old_for_correction_BT, inputs.rollout_logprobs_BT, mask_BT, config
    )
    loss = (masked(weights_BT) * terms.loss_BT * correction_BT).sum()

    with torch.no_grad():
        loss_tokens = int(mask_BT.sum())
        denominator = max(loss_tokens, 1)
        metrics = {
            name: float((flag_BT & mask_BT).sum()) / denominator
            for name, flag_BT in (terms.flags_BT | correction_flags_BT).items()
        }
        metrics["logprob_abs_diff"] = float((inputs.logprobs_BT - inputs.rollout_logprobs_BT).abs().sum()) / denominator
        ratio_BT = _ratio(inputs.logprobs_BT, inputs.rollout_logprobs_BT)
        metrics["ratio_abs_dev"] = float(masked((ratio_BT - 1).abs()).sum()) / denominator
        metrics["loss_tokens"] = float(loss_tokens)
    return loss, metrics
