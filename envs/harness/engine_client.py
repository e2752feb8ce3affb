"""Client of an OpenAI/vLLM-compatible engine, token in / token out (the vLLM wire format).

``complete`` posts token ids to ``/v1/completions`` with ``return_token_ids`` and ``logprobs: 0`` and returns the
sampled ids with the engine's logprob of each; ``chat`` posts messages to ``/v1/chat/completions`` (text mode: the
server renders and re-tokenises), there to measure how often re-tokenising would have drifted (the vLLM check).

Every failure raises ``EngineError``: transport errors, timeouts, 5xx, 408 and 429 answers are ``retryable`` (the
rollout is re-run, not trained on). Any other 4xx answer, or a reply that breaks the wire format, raises
``EngineRejected``: the request or the server is wrong (model name, context length, a server without
``return_token_ids``), so every rollout would fail alike; the harness lets it propagate and the caller stops with
the engine's reply. The HTTP itself (timeouts, failure classes, reply checks) is ``envs.openai_http.ApiClient``'s.

With a fault injector (``envs.faults``), requests go through ``FaultTransport``: some are dropped, answered 500 or
stalled, as a sick engine would, and every request is bounded by the plan's ``timeout_s`` (as the in-process engine's
are, ``trainer.engine.completions``), so each injected fault is the same retryable ``EngineError`` a real one is.

Example::

    async with CompletionsClient("http://127.0.0.1:8000", model="policy") as engine:
        completion = await engine.complete(prompt_ids, Sampling(max_tokens=256, temperature=1.0, seed=0))
        completion.token_ids, completion.logprobs, completion.finish_reason
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any, Protocol, Self

import httpx
from pydantic import SecretStr

from envs.errors import RecipeError
from envs.faults import ENGINE_FAULTS, FaultInjector
from envs.openai_http import ApiClient, ApiError, first_choice, pool_limits


class EngineError(Exception):
    """The engine did not produce a completion; ``retryable`` for transport errors, timeouts, 5xx, 408 and 429."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class EngineRejected(EngineError, RecipeError):
    """The engine refused the request (HTTP 4xx) or replied off the wire format: a configuration error, not infra."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


@dataclass(frozen=True)
class Sampling:
    """How one request samples (vLLM's request fields of the same names); temperature 0 is greedy."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    """Generate ``max_tokens`` even past the end-of-sequence token (benchmarks, engine tests)."""


@dataclass(frozen=True)
class Completion:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "abort" (vLLM's values)
    weight_version: int | None = None  # our engine reports it; a stock vLLM server does not


@dataclass(frozen=True)
class ChatReply:
    text: str
    token_ids: list[int] | None  # the sampled ids when the server honours return_token_ids
    prompt_token_ids: list[int] | None
    finish_reason: str


class CompletionEngine(Protocol):
    """What the agent loop needs from an engine (``CompletionsClient``, ``trainer.engine.completions``, a double)."""

    async def complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion: ...


class CompletionsClient:
    """An ``ApiClient`` on one engine URL (behind ``faults``, when given); use as an async context manager (or call
    ``aclose``)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        timeout_s: float = 600.0,
        max_connections: int = 512,
        faults: FaultInjector | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        keys: Sequence[SecretStr] = (),
    ) -> None:
        """``transport``: an httpx transport to send through (an in-process app in tests); ``keys``: bearer keys every
        request carries (a gated engine's token)."""
        self.model = model
        limits = pool_limits(max_connections, max_connections)
        if faults is not None:  # an injected stall must hit the client's timeout, not the engine's long one
            timeout_s = min(timeout_s, faults.plan.timeout_s)
        self._api = ApiClient(
            base_url, timeout_s, keys=keys, limits=limits, transport=transport, faults=faults, fault_kinds=ENGINE_FAULTS
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._api.aclose()

    async def complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion:
        body = {"prompt": list(prompt_ids), "logprobs": 0} | self._body(sampling)
        _, choice = await self._post("/v1/completions", body)
        try:
            token_ids = [int(t) for t in choice["token_ids"]]
            logprobs = [float(lp) for lp in choice["logprobs"]["token_logprobs"]]
            finish_reason = str(choice["finish_reason"])
        except (KeyError, TypeError, ValueError) as error:
            raise EngineRejected(
                f"/v1/completions reply lacks token_ids / logprobs.token_logprobs / finish_reason ({error!r}); "
                "the server must support return_token_ids (vLLM >= 0.10.2)"
            ) from error
        if len(token_ids) != len(logprobs):
            raise EngineRejected(f"/v1/completions returned {len(token_ids)} token ids but {len(logprobs)} logprobs")
        version = choice.get("weight_version")
        return Completion(token_ids, logprobs, finish_reason, None if version is None else int(version))

    async def chat(
        self, messages: Sequence[Mapping[str, Any]], sampling: Sampling, tools: Sequence[Mapping[str, Any]] = ()
    ) -> ChatReply:
        body = {"messages": [dict(m) for m in messages]} | self._body(sampling)
        if tools:
            body["tools"] = [dict(t) for t in tools]
        data, choice = await self._post("/v1/chat/completions", body)
        try:
            text = choice["message"]["content"] or ""
            finish_reason = str(choice["finish_reason"])
        except (KeyError, TypeError) as error:
            raise EngineRejected(f"/v1/chat/completions reply lacks message.content ({error!r})") from None
        prompt = data.get("prompt_token_ids", choice.get("prompt_token_ids"))
        return ChatReply(text, choice.get("token_ids"), prompt, finish_reason)

    def _body(self, sampling: Sampling) -> dict[str, Any]:
        """The fields every request carries: the model, the sampling and ``return_token_ids`` (token in / out)."""
        sampling_fields = asdict(sampling) | {"stop_token_ids": list(sampling.stop_token_ids)}
        return {"model": self.model, **sampling_fields, "return_token_ids": True}

    async def _post(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], Mapping[str, Any]]:
        """The reply and its first choice; a failure as ``EngineError`` or ``EngineRejected`` (``_engine_error``)."""
        try:
            data = await self._api.post_json(path, body)
            return data, first_choice(data, path)
        except ApiError as error:
            raise _engine_error(error) from error


def _engine_error(error: ApiError) -> EngineError:
    """A retryable failure (busy, down, slow) as ``EngineError``; any other as ``EngineRejected``."""
    if error.failure.retryable:
        return EngineError(str(error), retryable=True)
    return EngineRejected(str(error))
