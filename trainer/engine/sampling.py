"""Token sampling from one row of logits: greedy, temperature and nucleus (top-p), with raw logprobs."""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.engine.types import SamplingParams


def top_p_filter(probs_V: Tensor, top_p: float) -> Tensor:
    """Nucleus filter (Holtzman et al. 2020): keep the smallest set of most likely tokens whose mass reaches top_p.

    A token sorted at rank r is kept iff the mass strictly before it, cumsum_r - p_r, is below top_p; the most likely
    token is always kept. The kept probabilities are renormalised to sum to 1.
    """
    if top_p >= 1.0:
        return probs_V
    sorted_p, order = probs_V.sort(descending=True)
    mass_before = sorted_p.cumsum(-1) - sorted_p
    sorted_p = torch.where(mass_before < top_p, sorted_p, torch.zeros_like(sorted_p))
    kept = torch.zeros_like(probs_V).scatter(-1, order, sorted_p)
    return kept / kept.sum()


def sample_token(
    logits_V: Tensor, params: SamplingParams, generator: torch.Generator
) -> tuple[int, float, dict[int, float]]:
    """Sample one token; return (token, raw logprob of that token, top-`params.logprobs` raw logprobs).

    temperature 0 → argmax; otherwise softmax(logits / temperature) → top-p → multinomial draw from `generator`.
    The reported logprobs are log_softmax(logits) of the raw logits (vLLM's default), not of the tempered
    distribution.
    """
    raw_logprobs_V = torch.log_softmax(logits_V.float(), dim=-1)
    if params.temperature == 0.0:
        token = int(torch.argmax(logits_V))
    else:
        probs_V = top_p_filter(torch.softmax(logits_V.float() / params.temperature, dim=-1), params.top_p)
        token = int(torch.multinomial(probs_V, 1, generator=generator))
    top: dict[int, float] = {}
    if params.logprobs:
        values, ids = raw_logprobs_V.topk(params.logprobs)
        top = dict(zip(ids.tolist(), values.tolist(), strict=True))
    return token, float(raw_logprobs_V[token]), top
