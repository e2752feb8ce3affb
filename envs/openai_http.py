"""The one client of OpenAI-style HTTP APIs (vLLM, our engine, a judge model): what every caller of one shares.

Callers (``envs.harness.engine_client``, ``envs.judge``, ``evals.mcq``, the trainer's engine control) build their
request bodies and read their reply fields; this module owns the rest:

* **base URL** — the root without a trailing slash; every call names a path relative to it;
* **auth** — ``Authorization: Bearer <key>``, the keys taken round-robin, one per call (a rate-limited key is rotated
  away); no keys, no header;
* **timeouts** — ``timeout_s`` bounds every call, connect to last byte (httpx's per-phase limits, connect at most
  ``CONNECT_TIMEOUT_S``, under one wall-clock limit);
* **failures** — every failure raises ``ApiError`` with its ``ApiFailure`` class (``classify_status`` for HTTP
  answers) and a message ``<path>: <detail>``; server text quoted in it has every secret (the keys, a password in the
  base URL) replaced by ``***`` first, in every form a server may echo it in (``echoes``); a base URL's userinfo
  (``user:password@``) is sent as Basic auth and kept out of the URL that reprs and httpx's log lines show;
* **replies** — ``post_json`` returns a JSON object or raises ``malformed_response``; ``first_choice`` reads a
  completion's first choice;
* **retries** — the policy is the caller's (the judge retries, the harness re-runs a rollout instead); the parts of
  one live here: ``ApiFailure.retryable``, the ``Retry-After`` header (``ApiError.retry_after_s``) and full-jitter
  ``backoff_delay_s``;
* **injected faults** — ``FaultTransport`` goes under the client (``transport=``) and answers some requests itself,
  as a sick server would (``envs.faults``): a judge's 429 with ``Retry-After``, 500, a reply slower than the timeout,
  a body that is not JSON; an engine's dropped connection, 500 or stall; so the caller's own retry policy (the
  judge's backoff, the harness's retryable ``EngineError``) is what handles them.

Example::

    async with ApiClient("http://127.0.0.1:8000/v1", timeout_s=60.0, keys=[SecretStr("sk-...")]) as api:
        choice = first_choice(await api.post_json("/chat/completions", body), "/chat/completions")
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import itertools
import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Self
from urllib.parse import quote, quote_plus, unquote

import httpx
from pydantic import SecretStr

from envs.faults import FaultInjector, FaultKind, FaultPlan

CONNECT_TIMEOUT_S = 30.0
"""Cap on the connect phase: a peer that takes longer to accept a connection is not coming."""
KEEPALIVE_EXPIRY_S = 2.0
"""How long an idle pooled connection is kept. Below the servers' own idle timeout (uvicorn's and vLLM's: 5 s): at
httpx's default (also 5 s) a request can go out on a connection the server is closing that instant and end in a
``ReadError`` — 7 of 824 rollouts of the cluster demo's de-risk did, and a 2 % infra gate counts them."""


def pool_limits(max_connections: int | None, max_keepalive_connections: int | None) -> httpx.Limits:
    """httpx pool limits whose idle connections expire before the server drops them (``KEEPALIVE_EXPIRY_S``)."""
    return httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_keepalive_connections,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )


QUOTE_CHARS = 500
"""How much server text an error message quotes (enough for vLLM's context-length refusals)."""
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)@")
"""A URL's scheme and userinfo (``user:password@``): the userinfo runs to the last ``@`` before the path."""


class ApiFailure(StrEnum):
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    AUTH = "auth"
    BAD_REQUEST = "bad_request"
    MALFORMED_RESPONSE = "malformed_response"

    @property
    def retryable(self) -> bool:
        """The same request may succeed later (a busy or unreachable server), as opposed to a wrong request/server."""
        return self in _RETRYABLE


_RETRYABLE = frozenset({ApiFailure.RATE_LIMITED, ApiFailure.SERVER_ERROR, ApiFailure.TIMEOUT, ApiFailure.CONNECTION})

# 4xx answers with a class of their own; 408 (request timeout) and 429 mean "not now" rather than "not this request".
_STATUS_FAILURE = {
    401: ApiFailure.AUTH,
    403: ApiFailure.AUTH,
    408: ApiFailure.TIMEOUT,
    429: ApiFailure.RATE_LIMITED,
}


def classify_status(status_code: int) -> ApiFailure | None:
    """The failure class of an HTTP status (``None`` for 2xx/3xx)."""
    if status_code in _STATUS_FAILURE:
        return _STATUS_FAILURE[status_code]
    if status_code >= 500:
        return ApiFailure.SERVER_ERROR
    if status_code >= 400:
        return ApiFailure.BAD_REQUEST
    return None


class ApiError(Exception):
    """One call failed: ``failure`` says why, ``detail`` what happened (keys already redacted), ``path`` where."""

    def __init__(self, failure: ApiFailure, path: str, detail: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"{path}: {detail}")
        self.failure = failure
        self.path = path
        self.detail = detail
        self.retry_after_s = retry_after_s


def backoff_delay_s(retry_index: int, base_s: float, max_s: float, rng: random.Random) -> float:
    """Full jitter: ``U(0, min(max_s, base_s * 2**retry_index))`` (Brooker, AWS Architecture Blog 2015)."""
    return rng.uniform(0.0, min(max_s, base_s * 2.0**retry_index))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if value is None or not value.strip():
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def public_url(url: str) -> str:
    """``url`` fit for reprs, logs and errors: its userinfo (``user:password@``, a credential) masked as ``***@``."""
    return _USERINFO.sub(r"\1***@", url)


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its userinfo, and the user name and password it held (decoded; None: it held none)."""
    found = _USERINFO.match(url)
    if found is None:
        return url, None
    user, _, password = found.group(2).partition(":")
    return found.group(1) + url[found.end() :], (unquote(user), unquote(password))


def echoes(secret: str) -> set[str]:
    """The forms a server may quote ``secret`` back in: as is, JSON-escaped (``\\/`` too, as PHP writes ``/``),
    percent-encoded (path or form style), and base64 (alone, or the ``Bearer`` header it came in)."""
    escaped = json.dumps(secret)[1:-1]
    plain = {secret, escaped, escaped.replace("/", "\\/"), quote(secret, safe=""), quote(secret), quote_plus(secret)}
    return plain | {base64.b64encode(text.encode()).decode() for text in (secret, f"Bearer {secret}")}


def _alternation(texts: set[str]) -> re.Pattern[str] | None:
    """One pattern matching any of ``texts``, the longest first (so no shorter form leaves a longer one's tail)."""
    return re.compile("|".join(map(re.escape, sorted(texts, key=len, reverse=True)))) if texts else None


class ApiClient:
    """An ``httpx.AsyncClient`` on one base URL; use as an async context manager (or call ``aclose``)."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float,
        *,
        keys: Sequence[SecretStr] = (),
        limits: httpx.Limits | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        faults: FaultInjector | None = None,
        fault_kinds: Sequence[FaultKind] = (),
    ) -> None:
        """``faults``: requests go through ``FaultTransport`` (``fault_kinds`` of them), over ``transport`` or a plain
        one with ``limits``."""
        limits = limits or pool_limits(100, 20)  # httpx's default pool sizes
        if faults is not None:
            transport = FaultTransport(transport or httpx.AsyncHTTPTransport(limits=limits), faults, fault_kinds)
        # A user name and password in the URL go as Basic auth, as httpx would send them, but not in the URL it logs.
        base_url, userinfo = split_userinfo(base_url)
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._keys = list(keys)
        self._key_cycle = itertools.cycle(self._keys)
        # The URL's password is a secret too; a lone user name is one when an API takes the key as the user.
        secrets = [key.get_secret_value() for key in self._keys] + ([userinfo[1] or userinfo[0]] if userinfo else [])
        self._secret_echoes = _alternation(set().union(*(echoes(secret) for secret in secrets if secret)))
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S))
        auth = httpx.BasicAuth(*userinfo) if userinfo else None
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, auth=auth, transport=transport, limits=limits
        )

    def __repr__(self) -> str:
        return f"ApiClient(base_url={self.base_url!r}, keys={len(self._keys)})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def redact(self, text: str, limit: int = QUOTE_CHARS) -> str:
        """Server text fit for logs and errors: every secret, in every form it may be echoed in, replaced by ``***``
        (before cutting: no secret half survives)."""
        if self._secret_echoes is not None:
            text = self._secret_echoes.sub("***", text)
        return text[:limit]

    async def post_json(
        self, path: str, body: Mapping[str, Any] | None = None, *, params: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """POST ``body`` as JSON to ``path``; the reply's JSON object, or ``ApiError``."""
        return await self._request("POST", path, body, params)

    async def get_json(self, path: str, *, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """GET ``path``; the reply's JSON object, or ``ApiError``."""
        return await self._request("GET", path, None, params)

    async def _request(
        self, method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {next(self._key_cycle).get_secret_value()}"} if self._keys else None
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self._http.request(method, path, json=body, params=params, headers=headers)
        except (TimeoutError, httpx.TimeoutException) as error:
            detail = f"no reply within {self.timeout_s:g} s ({type(error).__name__})"
            raise ApiError(ApiFailure.TIMEOUT, path, detail) from error
        except httpx.TransportError as error:
            detail = self.redact(f"transport error {type(error).__name__}: {error}")
            raise ApiError(ApiFailure.CONNECTION, path, detail) from error
        failure = classify_status(response.status_code)
        if failure is not None:
            detail = f"HTTP {response.status_code}: {self.redact(response.text)}"
            raise ApiError(failure, path, detail, parse_retry_after(response.headers.get("retry-after")))
        try:
            data = response.json()
        except ValueError as error:
            detail = f"reply is not JSON: {self.redact(response.text, 200)!r}"
            raise ApiError(ApiFailure.MALFORMED_RESPONSE, path, detail) from error
        if not isinstance(data, dict):
            raise ApiError(ApiFailure.MALFORMED_RESPONSE, path, f"reply is a JSON {type(data).__name__}, not an object")
        return data


INJECTED_RETRY_AFTER_S = 0.05

InjectedReply = Callable[[httpx.Request, FaultPlan], Awaitable[httpx.Response | None]]
"""How a sick server answers one injected fault: a reply of its own, an exception, or None after a delay (the request
then goes on; the client's timeout is what ends a delay longer than it)."""


async def _rate_limited(request: httpx.Request, plan: FaultPlan) -> httpx.Response:
    headers = {"retry-after": f"{INJECTED_RETRY_AFTER_S:g}"}
    return httpx.Response(429, headers=headers, text="injected fault: rate limited", request=request)


async def _server_error(request: httpx.Request, plan: FaultPlan) -> httpx.Response:
    return httpx.Response(500, text="injected fault: internal server error", request=request)


async def _slow(request: httpx.Request, plan: FaultPlan) -> None:
    await asyncio.sleep(plan.stall_s)


async def _malformed(request: httpx.Request, plan: FaultPlan) -> httpx.Response:
    return httpx.Response(200, text='{"choices": [{"message": ', request=request)


async def _dropped(request: httpx.Request, plan: FaultPlan) -> httpx.Response:
    raise httpx.RemoteProtocolError("injected fault: the server dropped the connection", request=request)


INJECTED_REPLIES: dict[FaultKind, InjectedReply] = {
    FaultKind.JUDGE_429: _rate_limited,
    FaultKind.JUDGE_500: _server_error,
    FaultKind.JUDGE_SLOW: _slow,
    FaultKind.JUDGE_MALFORMED: _malformed,
    FaultKind.ENGINE_DROP: _dropped,
    FaultKind.ENGINE_500: _server_error,
    FaultKind.ENGINE_STALL: _slow,
}
"""The fault kinds an HTTP peer can have, and how ``FaultTransport`` plays each."""


class FaultTransport(httpx.AsyncBaseTransport):
    """``inner`` behind a fault injector that draws from ``kinds`` (the faults of this peer: ``JUDGE_FAULTS``,
    ``ENGINE_FAULTS``): an injected fault is answered here (``INJECTED_REPLIES``) and the request never leaves."""

    def __init__(self, inner: httpx.AsyncBaseTransport, faults: FaultInjector, kinds: Sequence[FaultKind]) -> None:
        unknown = set(kinds) - INJECTED_REPLIES.keys()
        if unknown:
            raise ValueError(f"no HTTP reply plays the faults {sorted(unknown)}")
        self.inner, self.faults, self.kinds = inner, faults, tuple(kinds)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        kind = self.faults.pick(self.kinds)
        if kind is not None:
            reply = await INJECTED_REPLIES[kind](request, self.faults.plan)
            if reply is not None:
                return reply
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def first_choice(data: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """``data["choices"][0]`` of a completion reply, or ``ApiError(malformed_response)``.

    The error names the reply's top-level fields, not their values: this function has no keys to redact them of.
    """
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        fields = ", ".join(sorted(map(str, data))[:10])
        raise ApiError(ApiFailure.MALFORMED_RESPONSE, path, f"reply has no choices (its fields: {fields or 'none'})")
    return choices[0]
