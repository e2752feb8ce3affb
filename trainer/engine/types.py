"""Contracts of the local inference engine: sampling parameters, completions, errors, options.

Logprobs follow vLLM's default (`logprobs_mode="raw_logprobs"`): the log-softmax of the raw model logits, before
temperature and top-p are applied, for the token that was actually sampled. A trainer that recomputes logprobs of the
same tokens with the same weights at temperature 1 therefore sees the same numbers (up to kernel noise).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

CONTROL_TOKEN_ENV = "RL_RECIPE_ENGINE_TOKEN"
"""The environment variable holding the token the server's control routes require (``Authorization: Bearer``)."""

Seed = Annotated[int, Field(ge=-(2**63), lt=2**63)]
"""A sampling seed: any 64-bit signed integer (vLLM's range; torch's generator takes no wider value)."""


class FinishReason(StrEnum):
    stop = "stop"  # a stop token (EOS or stop_token_ids) or a stop string was produced
    length = "length"  # max_tokens reached
    abort = "abort"  # cancelled by the client or by pause(mode="abort")


class PauseMode(StrEnum):
    keep = "keep"  # in-flight requests keep their KV cache and continue unchanged after resume()
    abort = "abort"  # in-flight and queued requests finish at once with finish_reason="abort"


class EngineRequestError(ValueError):
    """A request the engine refuses (bad ids, over-long context, bad parameters); the server maps it to HTTP 400."""


class SamplingParams(BaseModel):
    """Per-request sampling, as in vLLM. temperature 0 is greedy; seed makes sampling reproducible per request."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: Seed | None = None
    max_tokens: int | None = Field(None, ge=1, description="None: up to the context limit")
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = Field((), description="stop strings; need an engine built with a tokenizer")
    ignore_eos: bool = False
    logprobs: int = Field(0, ge=0, le=20, description="how many top alternatives to report per token (0: none)")


@dataclass(frozen=True)
class Completion:
    """One finished request. `logprobs_T[t]` is the raw-model fp32 logprob of `token_ids_T[t]`."""

    prompt_token_ids: list[int]
    token_ids_T: list[int]
    logprobs_T: list[float]
    top_logprobs_T: list[dict[int, float]]
    finish_reason: FinishReason
    stop_reason: int | str | None  # the stop token id or stop string that ended the request, else None
    weight_version_start: int  # weights version that sampled the first token
    weight_version: int  # weights version that sampled the last token
    cached_tokens: int = 0  # leading prompt tokens whose keys/values came from the prefix cache (not recomputed)
