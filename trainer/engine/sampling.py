"""Batched token sampling from a [B, V] block of logits: greedy, temperature and nucleus (top-p), with raw logprobs.

One call serves the whole decode batch (a handful of tensor ops, not a loop over requests). Each sampled row draws
its token by inverse-CDF sampling with a uniform `u_b` that the caller takes from that request's own seeded stream,
so a seed reproduces its tokens whatever else shares the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def top_p_filter(probs_BV: Tensor, top_p: float | Tensor) -> Tensor:
    """Nucleus filter (Holtzman et al. 2020): keep the smallest set of most likely tokens whose mass reaches top_p.

    A token sorted at rank r is kept iff the mass strictly before it, cumsum_r - p_r, is below top_p; the most likely
    token is always kept (also when a tiny top_p rounds to 0 in float32). The kept probabilities are renormalised to
    sum to 1. `top_p` is a float or a tensor that broadcasts against [..., 1] (one value per row).
    """
    if isinstance(top_p, float) and top_p >= 1.0:
        return probs_BV
    sorted_p, order = probs_BV.sort(dim=-1, descending=True)
    mass_before = sorted_p.cumsum(-1) - sorted_p
    keep = mass_before < top_p
    keep[..., 0] = True
    sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
    kept = torch.zeros_like(probs_BV).scatter(-1, order, sorted_p)
    return kept / kept.sum(-1, keepdim=True)


def inverse_cdf_sample(probs_BV: Tensor, u_B: Tensor) -> Tensor:
    """token_b = min{i : cdf_b(i) > u_b * cdf_b(V-1)}, cdf_b the cumulative sum of row b: a draw from probs_b for
    u_b ~ U[0, 1); zero-probability tokens are never drawn (their cdf equals their predecessor's). Where rounding
    makes u_b * total reach the total, the draw is capped at the first index whose cdf reaches the total (the last
    token with mass)."""
    cdf_BV = probs_BV.cumsum(-1)
    total_B1 = cdf_BV[:, -1:].contiguous()
    drawn_B1 = torch.searchsorted(cdf_BV, u_B[:, None].to(cdf_BV.dtype) * total_B1, right=True)
    return torch.minimum(drawn_B1, torch.searchsorted(cdf_BV, total_B1))[:, 0]


@dataclass(frozen=True)
class BatchSample:
    """Per-row results: sampled token ids, their raw logprobs, and the `top_k` best raw (logprob, id) columns."""

    tokens_B: list[int]
    logprobs_B: list[float]
    top_values_BK: list[list[float]]
    top_ids_BK: list[list[int]]


def sample_batch(
    logits_BV: Tensor, temperature_B: list[float], top_p_B: list[float], u_B: list[float], top_k: int
) -> BatchSample:
    """Sample one token per row. temperature 0 → argmax; otherwise exp((logits - max) / temperature) → top-p →
    inverse-CDF draw with u_b (the draw needs no normalised distribution, only its cumulative sum). Reported
    logprobs are the raw logits' log-softmax, (logits - max) - log(sum(exp(logits - max))) (vLLM's default
    `raw_logprobs`), not the tempered distribution's; `top_k` > 0 also returns each row's k best raw logprobs.

    Any positive temperature is safe: the logits are shifted to a maximum of 0 before dividing (so the best token's
    tempered logit is 0, never inf - inf) and the temperature is floored at float32's smallest normal number (a
    smaller one, 1e-320, would round to 0 and make 0 / 0). At temperature 1 the tempered weights are the log-softmax's
    own exponentials, so the common RL case costs one exp over the vocabulary, not three."""
    logits_BV = logits_BV.float()
    sampled = [t > 0.0 for t in temperature_B]
    if all(sampled):  # no greedy row: skip argmax, which costs 10x an amax (torch 2.13, CPU)
        max_B1, greedy_B = logits_BV.amax(-1, keepdim=True), None
    else:
        max_B1, best_B1 = logits_BV.max(-1, keepdim=True)  # the first best index, as argmax
        greedy_B = best_B1[:, 0]
    shifted_BV = logits_BV - max_B1
    exp_BV = shifted_BV.exp()
    log_total_B1 = exp_BV.sum(-1, keepdim=True).log()
    if greedy_B is None:
        tokens_B = _draw(shifted_BV, exp_BV, temperature_B, top_p_B, u_B)
    elif any(sampled):
        drawn_B = _draw(shifted_BV, exp_BV, temperature_B, top_p_B, u_B)
        tokens_B = torch.where(torch.tensor(sampled), drawn_B, greedy_B)
    else:
        tokens_B = greedy_B
    logprobs_B = (shifted_BV.gather(-1, tokens_B[:, None]) - log_total_B1)[:, 0]
    if not top_k:
        no_alternatives = [[] for _ in sampled]
        return BatchSample(tokens_B.tolist(), logprobs_B.tolist(), no_alternatives, no_alternatives)
    top_shifted, top_ids = shifted_BV.topk(top_k, dim=-1)  # the raw logprobs' order: they differ by a row constant
    return BatchSample(tokens_B.tolist(), logprobs_B.tolist(), (top_shifted - log_total_B1).tolist(), top_ids.tolist())


def _draw(
    shifted_BV: Tensor, exp_BV: Tensor, temperature_B: list[float], top_p_B: list[float], u_B: list[float]
) -> Tensor:
    """Every row's inverse-CDF draw (greedy rows' are discarded by the caller): weights exp(shifted / temperature),
    which at temperature 1 are `exp_BV` itself, then the top-p filter where any row asks for one."""
    weights_BV = exp_BV
    if any(t != 1.0 for t in temperature_B if t > 0.0):
        temps_B1 = torch.tensor(temperature_B).clamp_min(torch.finfo(torch.float32).tiny)[:, None]
        weights_BV = (shifted_BV / temps_B1).exp()
    if min(top_p_B) < 1.0:
        weights_BV = top_p_filter(weights_BV / weights_BV.sum(-1, keepdim=True), torch.tensor(top_p_B)[:, None])
    return inverse_cdf_sample(weights_BV, torch.tensor(u_B))
