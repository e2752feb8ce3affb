"""LLM judge client: judges one ``llm_judge`` rubric criterion with an OpenAI-compatible chat model.

``LlmJudgeClient`` satisfies the ``envs.graders.Judge`` protocol. Each call sends one criterion to
``POST {base_url}/chat/completions`` and asks for a strict JSON verdict ``{"passed": bool, "reason": str}``.

How it behaves under failure:

* Keys rotate round-robin: every HTTP attempt takes the next key, so a rate-limited key is rotated away.
* Retryable failures (``rate_limited`` 429, ``server_error`` 5xx, ``timeout``, ``connection``) back off with
  full jitter, ``sleep = U(0, min(backoff_max_s, backoff_base_s * 2**retry))`` (Brooker, "Exponential Backoff
  And Jitter", AWS Architecture Blog 2015); a ``Retry-After`` header replaces the jittered sleep, capped at
  ``backoff_max_s``.
* A reply that is not a verdict is re-asked (the bad reply and a correction go back into the conversation).
* ``auth`` (401/403) and ``bad_request`` (other 4xx) fail at once; anything left failing after ``max_attempts``
  HTTP attempts raises ``JudgeError`` carrying its ``ApiFailure`` class.
* Keys never reach logs, reprs, exceptions or serialised config: they are ``SecretStr``, stripped and checked at load
  (a key an HTTP header cannot carry is refused naming where it came from: sent, the HTTP library would quote it),
  and any server text that is quoted (an error body may echo the key, JSON-escaped or URL-encoded too) is redacted
  first. A password in ``base_url`` is redacted the same way, and reprs mask the URL's userinfo.

The HTTP itself — key rotation, the timeout on each attempt, failure classes, ``Retry-After``, the jittered
backoff, redaction — is ``envs.openai_http``'s; the retry loop, the re-ask and the metrics are the judge's own.

All HTTP runs on one private event-loop thread owned by the client, so the connection pool, the concurrency
semaphore and the metrics are shared by every caller: sync ``judge`` from any thread (with or without a
running loop there) and ``judge_async`` from any loop.

Example::

    config = JudgeConfig(base_url="http://127.0.0.1:8000/v1", model="judge", api_key_env="JUDGE_API_KEYS")
    with LlmJudgeClient(config) as judge:
        verdict = judge.judge(task.prompt, "States FY2025 revenue of $412.5m", answer, evidence="")
        print(verdict.passed, verdict.reason, judge.metrics().attempts)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import os
import random
import re
import statistics
import threading
import time
from collections import Counter, deque
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StrictBool, ValidationError

from envs.errors import RecipeError
from envs.faults import JUDGE_FAULTS, FaultInjector
from envs.graders import JudgeVerdict
from envs.openai_http import ApiClient, ApiError, ApiFailure, backoff_delay_s, first_choice, pool_limits, public_url

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

CHAT_PATH = "/chat/completions"
_HEADER_SAFE_KEY = re.compile(r"[\x21-\x7e]+")
"""A key ``Authorization: Bearer <key>`` can carry: visible ASCII, no whitespace or control character inside."""

# --- configuration ---------------------------------------------------------------------------------------------------


class JudgeConfig(BaseModel):
    """Where the judge model lives and how hard to try.

    Keys come from ``api_keys`` (e.g. loaded from a secret store by the caller) and/or the environment variable
    named by ``api_key_env`` (one key or a comma-separated list). With neither, requests carry no
    ``Authorization`` header (a local vLLM judge).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    # core
    base_url: str = Field(min_length=1, description="OpenAI-compatible root, e.g. http://host:8000/v1")
    model: str = Field(min_length=1)
    api_key_env: str | None = Field(default=None, description="name of an env var holding a key or key,key,...")
    api_keys: list[SecretStr] = Field(default_factory=list)
    # advanced
    max_concurrency: int = Field(default=8, ge=1, description="HTTP requests in flight at once, all callers")
    timeout_s: float = Field(default=60.0, gt=0, description="limit on one HTTP attempt, connect to last byte")
    max_attempts: int = Field(default=6, ge=1, description="HTTP attempts per criterion, re-asks included")
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0, description="cap on every sleep, Retry-After included")
    temperature: float = Field(default=0.0, ge=0)
    max_tokens: int = Field(default=512, ge=16)
    max_evidence_chars: int = Field(default=20_000, ge=0, description="longer evidence is cut to fit the context")

    def resolve_keys(self) -> list[SecretStr]:
        """Direct keys first, then the ones in ``api_key_env``, each stripped of the whitespace around it (a key file's
        last newline). Raises ``JudgeKeyError`` if the named variable is unset or empty, or a key is empty or holds a
        character an HTTP header cannot carry; the error names where the key came from, never the key."""
        keys = [_clean_key(key.get_secret_value(), f"judge api_keys[{i}]") for i, key in enumerate(self.api_keys)]
        if self.api_key_env is not None:
            parts = [part for part in os.environ.get(self.api_key_env, "").split(",") if part.strip()]
            if not parts:
                raise JudgeKeyError(
                    f"judge api_key_env names {self.api_key_env!r}, but that variable is unset or empty"
                )
            keys += [_clean_key(part, f"key {i + 1} of ${self.api_key_env}") for i, part in enumerate(parts)]
        return keys

    def call_deadline_s(self) -> float:
        """Upper bound on one criterion's wall time: every attempt timing out and every sleep at its cap."""
        return self.max_attempts * (self.timeout_s + self.backoff_max_s) + 1.0

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        """Pydantic's, with ``base_url``'s userinfo masked: ``user:password@`` may hold a key."""
        return [(name, public_url(value) if name == "base_url" else value) for name, value in super().__repr_args__()]


def _clean_key(raw: str, source: str) -> SecretStr:
    """``raw`` without the whitespace around it; ``JudgeKeyError`` naming ``source`` if it is empty or holds a character
    an ``Authorization`` header cannot carry — sent, the HTTP library would refuse it quoting the whole header."""
    key = raw.strip()
    if not _HEADER_SAFE_KEY.fullmatch(key):
        raise JudgeKeyError(
            f"{source} is empty or holds a character an HTTP header cannot carry (a control character, whitespace "
            "inside the key, non-ASCII); fix the key"
        )
    return SecretStr(key)


# --- failures --------------------------------------------------------------------------------------------------------


class JudgeKeyError(RecipeError, ValueError):
    """The judge's keys cannot be used as configured; the message says where a key came from, never the key."""


class JudgeError(Exception):
    """A criterion could not be judged. ``failure`` says why; the message never holds a key."""

    def __init__(self, failure: ApiFailure, message: str, attempts: int) -> None:
        super().__init__(f"[{failure}] {message} (after {attempts} attempt(s))")
        self.failure = failure
        self.message = message
        self.attempts = attempts

    def __reduce__(self) -> tuple[type[JudgeError], tuple[ApiFailure, str, int]]:
        # Picklable across Ray / Prefect result boundaries despite the custom signature.
        return type(self), (self.failure, self.message, self.attempts)


# --- prompt and parsing ----------------------------------------------------------------------------------------------

# APEX-Agents' grading rules: binary criteria, every part must hold, and only what the run left behind is evidence.
SYSTEM_PROMPT = (
    "You are a strict grader. You judge whether an agent's work meets ONE rubric criterion.\n"
    "Judge only that criterion, using the task, the agent's final answer and the evidence given.\n"
    "Rules:\n"
    "1. The criterion is met only if every part of it holds: when it joins several requirements (and, lists, "
    "numbers with their units), one unmet part fails it. Partly met is not met.\n"
    "2. The agent's claims about files it wrote or edited are not evidence. A file counts only as the evidence "
    "shows it (the world changes and the file contents listed); a file the evidence does not show does not exist.\n"
    "3. When the final answer and the evidence do not show that the criterion holds, it is not met.\n"
    'Reply with exactly one JSON object and nothing else: {"passed": true|false, "reason": "<one sentence>"}'
)

REASK_PROMPT = (
    'That reply was not a valid verdict. Reply with exactly one JSON object: {"passed": true|false, '
    '"reason": "<one sentence>"}, where "passed" is a JSON boolean. No other text.'
)


def build_messages(
    task_prompt: str, criterion_text: str, answer: str | None, evidence: str, max_evidence_chars: int
) -> list[dict[str, str]]:
    """The chat messages that ask for one criterion's verdict (evidence cut to ``max_evidence_chars``)."""
    if len(evidence) > max_evidence_chars:
        cut = len(evidence) - max_evidence_chars
        evidence = f"{evidence[:max_evidence_chars]}\n[... {cut} more characters cut ...]"
    user = (
        f"## Task given to the agent\n{task_prompt}\n\n"
        f"## Criterion\n{criterion_text}\n\n"
        f"## Agent's final answer\n{answer if answer is not None else '(no final answer)'}\n\n"
        f"## Evidence (the files the run added, removed or modified, and their contents)\n{evidence or '(none)'}"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


class _VerdictPayload(BaseModel):
    passed: StrictBool
    reason: str


def parse_verdict(content: str) -> JudgeVerdict | None:
    """The first JSON object in ``content`` that is a verdict, or ``None``.

    Tolerates code fences and text around the object (the scan tries every ``{``); ``passed`` must be a real JSON
    boolean — ``"yes"`` or ``1`` count as malformed, since guessing would turn a confused judge into a reward.
    """
    decoder = json.JSONDecoder()
    start = content.find("{")
    while start != -1:
        try:
            obj, _ = decoder.raw_decode(content, start)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            try:
                payload = _VerdictPayload.model_validate(obj)
            except ValidationError:
                payload = None
            if payload is not None:
                return JudgeVerdict(passed=payload.passed, reason=payload.reason)
        start = content.find("{", start + 1)
    return None


# --- metrics ---------------------------------------------------------------------------------------------------------


class JudgeMetrics(BaseModel):
    """A snapshot of what a client has done, for stage reports."""

    model_config = ConfigDict(frozen=True)

    calls: int
    succeeded: int
    attempts: int
    retries_by_class: dict[ApiFailure, int]
    failures_by_class: dict[ApiFailure, int]
    latency_mean_s: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_max_s: float | None


class _MetricsRecorder:
    """Thread-safe counters; latencies keep the last ``window`` calls for percentiles."""

    def __init__(self, window: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._calls = 0
        self._succeeded = 0
        self._attempts = 0
        self._retries: Counter[ApiFailure] = Counter()
        self._failures: Counter[ApiFailure] = Counter()
        self._latencies_s: deque[float] = deque(maxlen=window)

    def attempt(self) -> None:
        with self._lock:
            self._attempts += 1

    def retry(self, failure: ApiFailure) -> None:
        with self._lock:
            self._retries[failure] += 1

    def finish(self, latency_s: float, failure: ApiFailure | None) -> None:
        with self._lock:
            self._calls += 1
            self._latencies_s.append(latency_s)
            if failure is None:
                self._succeeded += 1
            else:
                self._failures[failure] += 1

    def snapshot(self) -> JudgeMetrics:
        with self._lock:
            latencies = sorted(self._latencies_s)
            return JudgeMetrics(
                calls=self._calls,
                succeeded=self._succeeded,
                attempts=self._attempts,
                retries_by_class=dict(self._retries),
                failures_by_class=dict(self._failures),
                latency_mean_s=statistics.fmean(latencies) if latencies else None,
                latency_p50_s=_quantile(latencies, 0.50),
                latency_p95_s=_quantile(latencies, 0.95),
                latency_max_s=latencies[-1] if latencies else None,
            )


def _quantile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank quantile: the value at rank ``ceil(q * n)`` (1-based) of the sorted values."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values) - 1e-9))  # the epsilon keeps 0.95 * 20 at rank 19
    return sorted_values[rank - 1]


# --- client ----------------------------------------------------------------------------------------------------------


class LlmJudgeClient:
    """Judges criteria over HTTP with rotation, backoff, a concurrency limit and metrics. Close it when done."""

    def __init__(
        self, config: JudgeConfig, rng: random.Random | None = None, faults: FaultInjector | None = None
    ) -> None:
        self.config = config
        self._faults = faults
        keys = config.resolve_keys()
        self._rng = rng or random.Random()
        self._metrics = _MetricsRecorder()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="llm-judge-loop", daemon=True)
        self._thread.start()
        self._api, self._semaphore = self._submit(self._open(keys)).result()
        self._closed = False

    def __repr__(self) -> str:
        return f"LlmJudgeClient(api={self._api!r}, model={self.config.model!r})"

    async def _open(self, keys: Sequence[SecretStr]) -> tuple[ApiClient, asyncio.Semaphore]:
        # Both belong to the private loop: created on it, used only on it. The semaphore alone bounds concurrency;
        # an unbounded pool keeps httpx's own 100-connection default from queueing requests behind our back.
        limits = pool_limits(None, self.config.max_concurrency)
        # with faults: injected 429 / 500 / slow / malformed replies (envs.faults), under the same retry loop
        api = ApiClient(
            self.config.base_url,
            self.config.timeout_s,
            keys=keys,
            limits=limits,
            faults=self._faults,
            fault_kinds=JUDGE_FAULTS,
        )
        return api, asyncio.Semaphore(self.config.max_concurrency)

    def _submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        if self._loop.is_closed() or threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LlmJudgeClient is closed or was called from its own event-loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    # --- lifecycle

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._submit(self._api.aclose()).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- public API

    def metrics(self) -> JudgeMetrics:
        return self._metrics.snapshot()

    def judge(self, task_prompt: str, criterion_text: str, answer: str | None, evidence: str) -> JudgeVerdict:
        """Sync form (the ``Judge`` protocol); blocks the calling thread, whatever loop runs there."""
        return self._wait(self._judge_one(task_prompt, criterion_text, answer, evidence), n_calls=1)

    async def judge_async(
        self, task_prompt: str, criterion_text: str, answer: str | None, evidence: str
    ) -> JudgeVerdict:
        return await self._wait_async(self._judge_one(task_prompt, criterion_text, answer, evidence), n_calls=1)

    def judge_criteria(
        self, task_prompt: str, criteria: Sequence[str], answer: str | None, evidence: str
    ) -> list[JudgeVerdict]:
        """Verdicts for several criteria of one rollout, judged concurrently, in ``criteria`` order."""
        return self._wait(self._judge_many(task_prompt, criteria, answer, evidence), n_calls=len(criteria))

    async def judge_criteria_async(
        self, task_prompt: str, criteria: Sequence[str], answer: str | None, evidence: str
    ) -> list[JudgeVerdict]:
        return await self._wait_async(self._judge_many(task_prompt, criteria, answer, evidence), len(criteria))

    def _deadline_s(self, n_calls: int) -> float:
        """Outer limit on ``n_calls`` criteria: they run in waves of ``max_concurrency``, each wave bounded."""
        waves = max(1, math.ceil(n_calls / self.config.max_concurrency))
        return waves * self.config.call_deadline_s()

    # Attempts are already bounded; the outer deadline guards against anything that is not (a stuck loop).

    def _wait(self, coro: Coroutine[Any, Any, _T], n_calls: int) -> _T:
        future = self._submit(coro)
        try:
            return future.result(timeout=self._deadline_s(n_calls))
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise JudgeError(ApiFailure.TIMEOUT, "judge call exceeded its overall deadline", 0) from None

    async def _wait_async(self, coro: Coroutine[Any, Any, _T], n_calls: int) -> _T:
        try:
            return await asyncio.wait_for(asyncio.wrap_future(self._submit(coro)), self._deadline_s(n_calls))
        except TimeoutError:
            raise JudgeError(ApiFailure.TIMEOUT, "judge call exceeded its overall deadline", 0) from None

    # --- core (runs on the private loop)

    async def _judge_many(
        self, task_prompt: str, criteria: Sequence[str], answer: str | None, evidence: str
    ) -> list[JudgeVerdict]:
        outcomes = await asyncio.gather(
            *(self._judge_one(task_prompt, criterion, answer, evidence) for criterion in criteria),
            return_exceptions=True,
        )
        # Wait for all, then raise the first error: no call is left running unobserved.
        verdicts: list[JudgeVerdict] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            verdicts.append(outcome)
        return verdicts

    async def _judge_one(
        self, task_prompt: str, criterion_text: str, answer: str | None, evidence: str
    ) -> JudgeVerdict:
        config = self.config
        messages = build_messages(task_prompt, criterion_text, answer, evidence, config.max_evidence_chars)
        started = time.monotonic()
        backoff_retries = 0
        last: ApiError | None = None
        for attempt in range(1, config.max_attempts + 1):
            if last is not None:
                self._metrics.retry(last.failure)
                if self._faults is not None:
                    self._faults.plan.note_retry(str(last.failure), "judge")
                if last.failure is not ApiFailure.MALFORMED_RESPONSE:
                    await asyncio.sleep(self._sleep_s(last, backoff_retries))
                    backoff_retries += 1
            try:
                content = await self._attempt(messages)
            except ApiError as failed:
                last = failed
            else:
                verdict = parse_verdict(content)
                if verdict is not None:
                    self._metrics.finish(time.monotonic() - started, None)
                    return verdict
                detail = f"not a verdict: {self._api.redact(content, 300)!r}"
                last = ApiError(ApiFailure.MALFORMED_RESPONSE, CHAT_PATH, detail)
                messages = [
                    *messages,
                    {"role": "assistant", "content": content},
                    {"role": "user", "content": REASK_PROMPT},
                ]
            logger.warning(
                "judge attempt %d/%d failed: %s: %s", attempt, config.max_attempts, last.failure, last.detail
            )
            if not (last.failure.retryable or last.failure is ApiFailure.MALFORMED_RESPONSE):
                break  # a malformed reply is re-asked; auth and bad-request failures would only repeat
        assert last is not None  # the loop ran at least once and did not return
        self._metrics.finish(time.monotonic() - started, last.failure)
        raise JudgeError(last.failure, last.detail, attempt)

    def _sleep_s(self, failed: ApiError, retry_index: int) -> float:
        if failed.retry_after_s is not None:
            return min(failed.retry_after_s, self.config.backoff_max_s)
        return backoff_delay_s(retry_index, self.config.backoff_base_s, self.config.backoff_max_s, self._rng)

    async def _attempt(self, messages: list[dict[str, str]]) -> str:
        """One HTTP attempt; returns the reply text or raises ``ApiError``."""
        body = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        # The semaphore covers the request only, so callers sleeping in backoff do not hold a slot.
        async with self._semaphore:
            self._metrics.attempt()
            data = await self._api.post_json(CHAT_PATH, body)
        return _reply_content(data)


def _reply_content(data: dict[str, Any]) -> str:
    """The assistant text of a chat completion; a body of the wrong shape counts as a malformed reply."""
    choice = first_choice(data, CHAT_PATH)
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise ApiError(ApiFailure.MALFORMED_RESPONSE, CHAT_PATH, f"message content is {type(content).__name__}")
    if choice.get("finish_reason") == "length":
        raise ApiError(ApiFailure.MALFORMED_RESPONSE, CHAT_PATH, "reply cut off at max_tokens")
    return content
