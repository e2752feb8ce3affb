"""What every route of the server shares: the served model (``app.state.served``) and the control-token check.

``ServedModel`` holds the engine, its tokenizer, the served name and the control token, and does what both
generation routes need: tokenizing a text prompt off the event loop (refusing one too long for the context before it
is read), running ``n`` samples of a prompt, and rendering completions, usage and log-probs in the vLLM format.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from fastapi import Request
from transformers import PreTrainedTokenizerBase

from trainer.engine.engine import Engine
from trainer.engine.types import Completion, SamplingParams
from trainer.engine.wire import ApiError, SamplingFields

# NFC normalisation (the Qwen tokenizers') composes at most 4 characters into one, e.g. U+0391 U+0314 U+0342 U+0345.
_NORMALISATION_SHRINK = 4


@dataclass(frozen=True)
class ServedModel:
    """The engine behind the routes and how clients reach it; build it with ``ServedModel.of``."""

    engine: Engine
    tokenizer: PreTrainedTokenizerBase
    name: str
    control_token: str | None
    max_prompt_chars: int

    @classmethod
    def of(cls, engine: Engine, name: str, control_token: str | None = None) -> ServedModel:
        """`engine` (which must carry a tokenizer) served as `name`; with `control_token`, the control routes need
        the header ``Authorization: Bearer <control_token>``."""
        if engine.tokenizer is None:
            raise ValueError("the server needs an engine with a tokenizer (to render text and chat)")
        tokenizer = engine.tokenizer
        # No token decodes to more characters than the longest vocabulary entry, before normalisation shrinks the text.
        max_chars = engine.max_model_len * max(map(len, tokenizer.get_vocab())) * _NORMALISATION_SHRINK
        return cls(engine, tokenizer, name, control_token, max_chars)

    async def encode(self, text: str) -> list[int]:
        """Token ids of a text prompt, tokenized in a worker thread; a text too long for the context is refused."""
        if len(text) > self.max_prompt_chars:
            raise ApiError(
                HTTPStatus.BAD_REQUEST,
                f"the prompt ({len(text)} characters) cannot fit the context limit of {self.engine.max_model_len} "
                "tokens",
            )
        return await asyncio.to_thread(self.tokenizer.encode, text, add_special_tokens=False)

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.name:
            raise ApiError(HTTPStatus.NOT_FOUND, f"the model `{name}` does not exist; this server serves `{self.name}`")

    async def run_n(self, prompt_ids: list[int], fields: SamplingFields, params: SamplingParams) -> list[Completion]:
        # n samples of one prompt: distinct seeds seed, seed+1, ... keep a seeded request reproducible.
        seeds = [None if fields.seed is None else fields.seed + i for i in range(fields.n)]
        return list(
            await asyncio.gather(
                *(self.engine.generate(prompt_ids, params.model_copy(update={"seed": seed})) for seed in seeds)
            )
        )

    def text_of(self, completion: Completion) -> str:
        text = self.tokenizer.decode(completion.token_ids_T, skip_special_tokens=True)
        if isinstance(completion.stop_reason, str):  # like vLLM, the stop string is not part of the text
            text = text[: text.find(completion.stop_reason)] if completion.stop_reason in text else text
        return text

    def token_strings(self, ids: list[int]) -> list[str]:
        return [self.tokenizer.decode([t]) for t in ids]

    def completion_logprobs(self, completion: Completion) -> dict[str, Any]:
        """``choices[].logprobs`` of /v1/completions: tokens, their log-probs, the top alternatives, text offsets."""
        tokens = self.token_strings(completion.token_ids_T)
        offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        top = [
            {self.tokenizer.decode([t]): lp for t, lp in {**alts, token: logprob}.items()}
            for token, logprob, alts in zip(
                completion.token_ids_T, completion.logprobs_T, completion.top_logprobs_T, strict=True
            )
        ]
        return {"tokens": tokens, "token_logprobs": completion.logprobs_T, "top_logprobs": top, "text_offset": offsets}

    def chat_logprobs(self, completion: Completion) -> dict[str, Any]:
        """``choices[].logprobs`` of /v1/chat/completions: one entry per token with its top alternatives."""
        return {
            "content": [
                {
                    "token": tok,
                    "logprob": lp,
                    "top_logprobs": [{"token": self.tokenizer.decode([t]), "logprob": v} for t, v in alts.items()],
                }
                for tok, lp, alts in zip(
                    self.token_strings(completion.token_ids_T),
                    completion.logprobs_T,
                    completion.top_logprobs_T,
                    strict=True,
                )
            ]
        }


def usage(prompt_ids: list[int], completions: list[Completion]) -> dict[str, Any]:
    generated = sum(len(c.token_ids_T) for c in completions)
    return {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": generated,
        "total_tokens": len(prompt_ids) + generated,
        # As vLLM reports prefix-cache hits (with --enable-prompt-tokens-details).
        "prompt_tokens_details": {"cached_tokens": max((c.cached_tokens for c in completions), default=0)},
    }


async def served_model(request: Request) -> ServedModel:
    """The ``ServedModel`` of the app handling ``request`` (a FastAPI dependency; async, as FastAPI would run a plain
    function in its thread pool: a thread hand-off per request)."""
    return request.app.state.served


async def authorized(request: Request) -> None:
    """Refuse a control request without the served model's control token (none set: every request passes)."""
    token = (await served_model(request)).control_token
    given = request.headers.get("authorization", "").encode()
    if token is not None and not secrets.compare_digest(given, f"Bearer {token}".encode()):
        raise ApiError(HTTPStatus.UNAUTHORIZED, "control routes need the header 'Authorization: Bearer <token>'")
