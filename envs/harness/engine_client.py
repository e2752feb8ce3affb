"""Client of an OpenAI/vLLM-compatible engine, token in / token out (vLLM wire format; DESIGN "Engine protocol").

``complete`` posts token ids to ``/v1/completions`` with ``return_token_ids`` and ``logprobs: 0`` and returns the
sampled ids with the engine's logprob of each; ``chat`` posts messages to ``/v1/chat/completions`` (text mode: the
server renders and re-tokenises) and is used only by the TITO check to measure how often that would have drifted.

Every failure raises ``EngineError``: transport errors, timeouts, 5xx, 408 and 429 answers are ``retryable`` (the
rollout is re-run, not trained on). Any other 4xx answer, or a reply that breaks the wire format, raises
``EngineRejected``: the request or the server is wrong (model name, context length, a server without
``return_token_ids``), so every rollout would fail alike; the harness lets it propagate and the caller stops with
the engine's reply.

Example::

    async with CompletionsClient("http://127.0.0.1:8000", model="policy") as engine:
        completion = await engine.complete(prompt_ids, max_tokens=256, temperature=1.0, seed=0)
        completion.token_ids, completion.logprobs, completion.finish_reason
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self

import httpx

from envs.errors import RecipeError

# 4xx answers that mean "not now" rather than "not this request": a proxy's rate limit, a request timeout.
_BUSY = frozenset({408, 429})


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
    """What the agent loop needs from an engine (``CompletionsClient`` or a test double)."""

    async def complete(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_token_ids: Sequence[int] = (),
    ) -> Completion: ...


class CompletionsClient:
    """An ``httpx.AsyncClient`` on one engine URL; use as an async context manager (or call ``aclose``)."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 600.0, max_connections: int = 512) -> None:
        self.model = model
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_token_ids: Sequence[int] = (),
    ) -> Completion:
        body = {
            "model": self.model,
            "prompt": list(prompt_ids),
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "seed": seed,
            "stop_token_ids": list(stop_token_ids),
            "return_token_ids": True,
            "logprobs": 0,
        }
        choice = _first_choice(await self._post("/v1/completions", body))
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
        self,
        messages: Sequence[Mapping[str, Any]],
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> ChatReply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "seed": seed,
            "return_token_ids": True,
        }
        if tools:
            body["tools"] = [dict(t) for t in tools]
        data = await self._post("/v1/chat/completions", body)
        choice = _first_choice(data)
        try:
            text = choice["message"]["content"] or ""
            finish_reason = str(choice["finish_reason"])
        except (KeyError, TypeError) as error:
            raise EngineRejected(f"/v1/chat/completions reply lacks message.content ({error!r})") from None
        prompt = data.get("prompt_token_ids", choice.get("prompt_token_ids"))
        return ChatReply(text, choice.get("token_ids"), prompt, finish_reason)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._http.post(path, json=body)
        except httpx.TimeoutException as error:
            raise EngineError(f"{path}: timed out ({type(error).__name__})", retryable=True) from error
        except httpx.TransportError as error:
            raise EngineError(f"{path}: transport error {type(error).__name__}: {error}", retryable=True) from error
        if response.status_code >= 500 or response.status_code in _BUSY:
            raise EngineError(f"{path}: HTTP {response.status_code}: {response.text[:500]}", retryable=True)
        if response.status_code >= 400:
            raise EngineRejected(f"{path}: HTTP {response.status_code}: {response.text[:500]}")
        try:
            data = response.json()
        except ValueError as error:
            raise EngineRejected(f"{path}: reply is not JSON: {response.text[:200]}") from error
        if not isinstance(data, dict):
            raise EngineRejected(f"{path}: reply is not a JSON object")
        return data


def _first_choice(data: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise EngineRejected(f"the engine reply has no choices: {str(data)[:200]}")
    return choices[0]
