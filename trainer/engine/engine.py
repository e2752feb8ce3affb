"""The local inference engine: token ids in, token ids + raw fp32 logprobs out, with continuous batching.

A worker thread owns the model and the KV pool and runs steps. Each step (1) admits waiting requests into free KV
slots and prefills them as one right-padded batch, sampling their first token, and (2) decodes one token for every
request already running, as one batch. Requests come from any asyncio loop (`await engine.generate(...)`), join the
running batch at the next step and leave it as soon as they finish, so short requests never wait for long ones.

Control operations (weight updates, pause) run on the worker thread *between* steps, so a step never sees half-new
weights and `pause()` returns only once no further token will be produced:

    engine = Engine(model, tokenizer)
    completion = await engine.generate(prompt_ids, SamplingParams(temperature=1.0, seed=0, max_tokens=64))
    engine.pause(PauseMode.keep); engine.update_weights("runs/x/policy/step-3"); engine.resume()

Running requests fill KV slots 0 .. n-1 in `_running` order (a finished request's slot is refilled by the last
one), so a decode step is one forward over a contiguous block of the cache and one batched sampling call. Requests
admitted together get their slots shortest prompt first and are prefilled in runs of similar widths (`width_buckets`),
so a burst of prompts of 16–512 tokens is not all padded to 512.

A finished request's keys/values are parked in the prefix cache (prefix_cache.py), so the next turn of a rollout,
whose prompt extends it token for token, prefills only its new tokens.

Simplifications against vLLM: the prefix cache copies the longest common prefix out of one parked sequence (no
shared, hashed KV blocks), no chunked prefill, no preemption (a request holds its KV slot until it finishes;
`max_num_seqs` bounds the running batch).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import secrets
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field
from safetensors.torch import load_file
from torch import Tensor
from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM

from trainer.engine.forward import (
    DecodeStep,
    KVPool,
    ModelWeights,
    compiled_decode_step,
    decode,
    decode_step,
    forward,
)
from trainer.engine.prefix_cache import PrefixCache, PrefixHit
from trainer.engine.sampling import sample_batch
from trainer.engine.types import Completion, EngineRequestError, FinishReason, PauseMode, SamplingParams

_T = TypeVar("_T")
logger = logging.getLogger(__name__)
_UNIFORM_BLOCK = 64
_BUCKET_WIDTH_RATIO = 1.25


def width_buckets(widths: Sequence[int], ratio: float = _BUCKET_WIDTH_RATIO) -> list[tuple[int, int]]:
    """Cut ascending ``widths`` into runs [start, stop) whose widest is at most ``ratio`` × their narrowest, so a
    prefill padded to each run's widest computes at most ``ratio`` × its real tokens (one padded batch of prompts of
    16–512 tokens computed ~1.9× them); each run is one more forward, which costs little beside the padding saved."""
    buckets: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(widths) + 1):
        if i == len(widths) or widths[i] > ratio * widths[start]:
            buckets.append((start, i))
            start = i
    return buckets


class EngineConfig(BaseModel):
    """Scheduler and memory knobs of the local engine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int = Field(
        64,
        ge=1,
        description="KV slots = the most requests decoded together; a tiny model's decode step costs little more at "
        "64 rows than at 16, so 64 concurrent requests ran 1.8x (compiled) to 2.6x (eager) faster than with 16 slots "
        "(benchmarks/engine_vs_vllm.py)",
    )
    max_model_len: int | None = Field(None, ge=2, description="context limit; None: the model's max_position")
    max_prefill_tokens: int = Field(8192, ge=1, description="padded prompt tokens prefilled together in one step")
    kv_initial_capacity: int = Field(256, ge=1, description="initial KV length per slot (doubles on demand)")
    prefix_cache_slots: int = Field(
        64,
        ge=0,
        description="KV slots that keep finished requests' keys/values, so a request extending one (the next turn "
        "of a rollout) prefills only its new tokens; 0 disables the prefix cache (see prefix_cache.py)",
    )
    compile: bool = Field(
        False,
        description="run decode steps through torch.compile (inductor, C++ wrapper): ~2x faster steps on a tiny "
        "model; the first decode at batch 1 and at batch > 1 each compile once (~10-30 s, then cached on disk). "
        "Falls back to eager decoding, with a warning, if compilation fails (e.g. no C++ compiler).",
    )
    torch_threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads, set by the worker (process-wide); None keeps torch's setting. "
        "Tiny models decode fastest with 1 on a shared CPU: OpenMP spin-waits starve busy cores.",
    )
    attention_threads: int = Field(
        default_factory=lambda: len(os.sched_getaffinity(0)),
        ge=1,
        description="threads the decode-attention kernel splits a step's rows over (default: the cores this process "
        "may use). Attention reads the KV cache, which more cores read faster; its helpers wait for the next call "
        "spinning for up to 0.5 ms (yielding to other threads after 50 us), then block: an idle engine keeps no core "
        "busy, and a chunk no helper has claimed in time is run by the caller.",
    )


@dataclass(eq=False)
class _Sequence:
    """A request's mutable state; touched only by the worker thread once submitted (except `cancelled`)."""

    prompt: list[int]
    params: SamplingParams
    max_tokens: int
    generator: torch.Generator
    on_done: Callable[[Completion | BaseException], None]
    stop_ids: frozenset[int]  # the tokens that end this request: its stop_token_ids, and EOS unless ignored
    slot: int | None = None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    version_start: int = -1
    cached_tokens: int = 0  # leading prompt tokens restored from the prefix cache at admission
    cancelled: bool = False
    uniforms: list[float] = field(default_factory=list)  # pre-drawn from `generator`, consumed from the end

    def next_uniform(self) -> float:
        """The request's next U[0, 1) draw; drawing a block at a time keeps the generator off the per-step path."""
        if not self.uniforms:
            self.uniforms = torch.rand(_UNIFORM_BLOCK, generator=self.generator, dtype=torch.float64).tolist()[::-1]
        return self.uniforms.pop()


class Engine:
    """Continuous-batching Qwen3 engine over an HF `Qwen3ForCausalLM`; change its weights via `update_weights`
    (the forward holds fused copies of some of them, see forward.py)."""

    def __init__(
        self,
        model: Qwen3ForCausalLM,
        tokenizer: PreTrainedTokenizerBase | None = None,
        config: EngineConfig | None = None,
    ) -> None:
        self.config = config or EngineConfig()
        self.tokenizer = tokenizer
        self._model = model.eval()
        self.vocab_size: int = model.config.vocab_size
        max_position = model.config.max_position_embeddings
        self.max_model_len = min(self.config.max_model_len or max_position, max_position)
        self._weights = ModelWeights.from_hf(model, self.max_model_len)
        eos = model.generation_config.eos_token_id if model.generation_config else model.config.eos_token_id
        self.eos_token_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self._pool = KVPool(
            self._weights, self.config.max_num_seqs, self.config.kv_initial_capacity, self.config.prefix_cache_slots
        )
        self._prefix_cache = PrefixCache(self._pool) if self.config.prefix_cache_slots else None
        self._decode_step: DecodeStep = compiled_decode_step() if self.config.compile else decode_step
        self._cond = threading.Condition()
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        self._ops: deque[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = deque()
        self._paused = False
        self._closed = False
        self._version = 0
        self._thread = threading.Thread(target=self._loop, name="engine-worker", daemon=True)
        self._thread.start()

    # ----- public API -------------------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Weights version: 0 at start, +1 per `update_weights`."""
        return self._version

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def num_running(self) -> int:
        return len(self._running)

    async def generate(self, prompt_token_ids: Sequence[int], params: SamplingParams | None = None) -> Completion:
        """Generate one completion; raises EngineRequestError for a request the engine cannot serve.

        Cancelling the awaiting task aborts the request and frees its KV slot at the next step.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Completion] = loop.create_future()

        def deliver(result: Completion | BaseException) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop may be closed already
                loop.call_soon_threadsafe(_resolve, future, result)

        seq = self._make_sequence(prompt_token_ids, params or SamplingParams(), deliver)
        with self._cond:
            if self._closed:
                raise RuntimeError("engine is closed")
            self._waiting.append(seq)
            self._cond.notify_all()
        try:
            return await future
        except asyncio.CancelledError:
            seq.cancelled = True
            with self._cond:
                self._cond.notify_all()
            raise

    def update_weights(self, source: Mapping[str, Tensor] | str | os.PathLike[str]) -> int:
        """Load new weights (a state dict or a checkpoint folder of *.safetensors) between two steps, without
        restarting; in-flight requests continue with the new weights. Returns the new version."""
        state = _read_state_dict(source) if isinstance(source, str | os.PathLike) else dict(source)
        self._check_state_dict(state)
        return self._run_on_worker(lambda: self._apply_weights(state))

    def pause(self, mode: PauseMode = PauseMode.keep) -> None:
        """Stop stepping; returns once no further token will be produced. keep: in-flight requests keep their state
        and resume unchanged; abort: in-flight and queued requests finish now with finish_reason="abort"."""
        self._run_on_worker(lambda: self._pause(PauseMode(mode)))

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def close(self) -> None:
        """Stop the worker; unfinished requests finish with finish_reason="abort"."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- validation -------------------------------------------------------------------------------------------

    def _make_sequence(
        self, prompt: Sequence[int], params: SamplingParams, on_done: Callable[[Completion | BaseException], None]
    ) -> _Sequence:
        ids = list(prompt)
        if not ids:
            raise EngineRequestError("prompt is empty: give at least one token id")
        room = self.max_model_len - len(ids)  # checked first: an over-long prompt is refused before it is scanned
        max_tokens = params.max_tokens if params.max_tokens is not None else room
        if max_tokens > room or room < 1:
            raise EngineRequestError(
                f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) = {len(ids) + max_tokens} tokens exceeds "
                f"the context limit of {self.max_model_len} tokens"
            )
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise EngineRequestError("prompt token ids must be integers")
        bad = sorted({t for t in (*ids, *params.stop_token_ids) if not 0 <= t < self.vocab_size})
        if bad:
            raise EngineRequestError(f"token ids outside the vocabulary [0, {self.vocab_size}): {bad[:10]}")
        if params.stop and self.tokenizer is None:
            raise EngineRequestError("stop strings need an engine built with a tokenizer; use stop_token_ids")
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_token_ids)
        return _Sequence(ids, params, max_tokens, torch.Generator().manual_seed(seed), on_done, stop_ids)

    def _check_state_dict(self, state: Mapping[str, Tensor]) -> None:
        own = self._model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise EngineRequestError(f"weights have keys the model lacks: {unknown[:5]}")
        tied = {"lm_head.weight"} if self._model.config.tie_word_embeddings else set()
        missing = sorted(set(own) - set(state) - tied)
        if missing:
            raise EngineRequestError(f"weights lack keys: {missing[:5]}")
        wrong = [f"{k}: {tuple(v.shape)} != {tuple(own[k].shape)}" for k, v in state.items() if v.shape != own[k].shape]
        if wrong:
            raise EngineRequestError(f"weight shapes differ: {wrong[:5]}")

    # ----- worker thread ----------------------------------------------------------------------------------------

    def _run_on_worker(self, fn: Callable[[], _T]) -> _T:
        if threading.current_thread() is self._thread:
            return fn()
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("engine is closed")
            self._ops.append((fn, future))
            self._cond.notify_all()
        return future.result()

    def _loop(self) -> None:
        if self.config.torch_threads is not None:
            torch.set_num_threads(self.config.torch_threads)
        while True:
            with self._cond:
                while not (self._closed or self._ops or (not self._paused and (self._running or self._waiting))):
                    self._cond.wait()
                if self._closed:
                    break
                ops = list(self._ops)
                self._ops.clear()
            for fn, future in ops:
                try:
                    future.set_result(fn())
                except Exception as exc:  # reported to the caller of the op; the worker keeps serving
                    future.set_exception(exc)
            if not ops:
                self._step_guarded()
        self._shutdown()

    def _step_guarded(self) -> None:
        try:
            self._step()
        except Exception as exc:  # a failed step fails its requests, never the engine
            for seq in [*self._running]:
                self._finish(seq, exc)

    def _step(self) -> None:
        for seq in [s for s in self._running if s.cancelled]:
            self._finish(seq, FinishReason.abort)
        decoding = list(self._running)
        admitted = self._admit()
        if admitted:
            self._prefill(admitted)
        if decoding:
            self._decode(decoding)

    def _admit(self) -> list[_Sequence]:
        """Waiting requests (in arrival order) while slots and the padded-prefill budget last, given slots shortest
        uncached prompt first so that `_prefill` can cut them into similar widths."""
        admitted: list[tuple[_Sequence, PrefixHit | None]] = []
        with self._cond:
            while self._waiting and self._pool.n_free > len(admitted):
                seq = self._waiting[0]
                hit = self._prefix_cache.lookup(seq.prompt) if self._prefix_cache else None
                cached = hit.n_tokens if hit else 0
                widest = max(
                    [len(seq.prompt) - cached, *(len(s.prompt) - (h.n_tokens if h else 0) for s, h in admitted)]
                )
                if admitted and widest * (len(admitted) + 1) > self.config.max_prefill_tokens:
                    break
                # Rows are right-padded to the widest: a row's padded positions (cached prefix + widest) must stay
                # inside the context, or they index past the RoPE table; such a prompt waits for the next step.
                furthest = max([cached, *(h.n_tokens for _, h in admitted if h)]) + widest
                if admitted and furthest > self.max_model_len:
                    break
                self._waiting.popleft()
                if seq.cancelled:
                    self._finish(seq, FinishReason.abort)
                    continue
                admitted.append((seq, hit))
            admitted.sort(key=lambda pair: len(pair[0].prompt) - (pair[1].n_tokens if pair[1] else 0))
            for seq, hit in admitted:
                seq.slot = self._pool.allocate()
                if hit is not None and self._prefix_cache is not None:
                    self._prefix_cache.restore(hit, seq.slot)
                    seq.cached_tokens = hit.n_tokens
        seqs = [seq for seq, _ in admitted]
        self._running.extend(seqs)
        return seqs

    def _prefill(self, seqs: list[_Sequence]) -> None:
        """Forwards over the admitted prompts' tokens past their cached prefixes (right-padded rows), one per run of
        similar widths (`width_buckets`; `_admit` gave slots in width order, so each run's slots are consecutive)."""
        device = self._weights.embed.device
        rows = [s.prompt[s.cached_tokens :] for s in seqs]
        for start, stop in width_buckets([len(row) for row in rows]):
            bucket = rows[start:stop]
            width = len(bucket[-1])
            padded = [row + [0] * (width - len(row)) for row in bucket]  # right-padding; see forward.py
            logits_BV = forward(
                self._weights,
                self._pool,
                seqs[start].slot,
                torch.tensor(padded, device=device),
                torch.tensor([s.cached_tokens for s in seqs[start:stop]], device=device),
                torch.tensor([len(row) - 1 for row in bucket], device=device),
            )
            self._sample(seqs[start:stop], logits_BV)

    def _decode(self, seqs: list[_Sequence]) -> None:
        """One token for each of `seqs` (slots 0 .. len(seqs) - 1)."""
        device = self._weights.embed.device
        tokens_B = torch.tensor([s.token_ids[-1] for s in seqs], device=device)
        pos_B = torch.tensor([len(s.prompt) + len(s.token_ids) - 1 for s in seqs], device=device)
        self._sample(
            seqs,
            decode(
                self._weights, self._pool, 0, tokens_B, pos_B, self._guarded_decode_step, self.config.attention_threads
            ),
        )

    def _guarded_decode_step(self, *args: Any) -> tuple[Tensor, Tensor, Tensor]:
        """The configured decode step; a compiled one that fails (no compiler, an inductor bug) is replaced by the
        eager step for the rest of the engine's life — slower, never wrong."""
        try:
            return self._decode_step(*args)
        except Exception as exc:
            if self._decode_step is decode_step:
                raise
            logger.warning("torch.compile of the decode step failed, decoding eagerly from now on: %s", exc)
            self._decode_step = decode_step
            return decode_step(*args)

    def _sample(self, seqs: list[_Sequence], logits_BV: Tensor) -> None:
        # Sampling runs on the CPU so each request's seeded torch.Generator gives the same draws on any device.
        params = [s.params for s in seqs]
        out = sample_batch(
            logits_BV.cpu(),
            [p.temperature for p in params],
            [p.top_p for p in params],
            [s.next_uniform() if p.temperature > 0.0 else 0.0 for s, p in zip(seqs, params, strict=True)],
            max(p.logprobs for p in params),
        )
        rows = zip(seqs, out.tokens_B, out.logprobs_B, out.top_ids_BK, out.top_values_BK, strict=True)
        for seq, token, logprob, top_ids, top_values in rows:
            if not seq.token_ids:
                seq.version_start = self._version
            seq.token_ids.append(token)
            seq.logprobs.append(logprob)
            k = seq.params.logprobs
            seq.top_logprobs.append(dict(zip(top_ids[:k], top_values[:k], strict=True)) if k else {})
            self._check_finished(seq, token)

    def _check_finished(self, seq: _Sequence, token: int) -> None:
        if token in seq.stop_ids:  # a stop token is reported as the stop reason, EOS is not (as vLLM)
            self._finish(seq, FinishReason.stop, stop_reason=token if token in seq.params.stop_token_ids else None)
        elif (hit := self._stop_string_hit(seq)) is not None:
            self._finish(seq, FinishReason.stop, stop_reason=hit)
        elif len(seq.token_ids) >= seq.max_tokens:
            self._finish(seq, FinishReason.length)

    def _stop_string_hit(self, seq: _Sequence) -> str | None:
        if not seq.params.stop or self.tokenizer is None:
            return None
        # A string of n characters spans at most 4n byte-level tokens; earlier hits would have stopped earlier.
        window = 4 * max(len(s) for s in seq.params.stop)
        tail = self.tokenizer.decode(seq.token_ids[-window:], skip_special_tokens=True)
        return next((s for s in seq.params.stop if s in tail), None)

    def _finish(
        self, seq: _Sequence, outcome: FinishReason | BaseException, stop_reason: int | str | None = None
    ) -> None:
        if seq.slot is not None:
            if self._prefix_cache is not None and not isinstance(outcome, BaseException):
                # Keys/values exist for every token fed to the model: the prompt and all sampled tokens but the last.
                self._prefix_cache.park(seq.slot, seq.prompt + seq.token_ids[:-1])
            # The last running request moves into the freed slot, keeping slots 0 .. n-1 aligned with `_running`;
            # its keys/values cover at most its prompt and sampled tokens.
            last = self._running[-1]
            moved = self._pool.release(seq.slot, len(last.prompt) + len(last.token_ids))
            self._running.pop()
            if moved is not None:
                self._running[seq.slot] = last
                last.slot = seq.slot
            seq.slot = None
        if isinstance(outcome, BaseException):
            seq.on_done(outcome)
            return
        seq.on_done(
            Completion(
                prompt_token_ids=seq.prompt,
                token_ids_T=seq.token_ids,
                logprobs_T=seq.logprobs,
                top_logprobs_T=seq.top_logprobs,
                finish_reason=outcome,
                stop_reason=stop_reason,
                weight_version_start=seq.version_start if seq.token_ids else self._version,
                weight_version=self._version,
                cached_tokens=seq.cached_tokens,
            )
        )

    def _pause(self, mode: PauseMode) -> None:
        self._paused = True
        if mode is PauseMode.abort:
            self._abort_all()

    def _abort_all(self) -> None:
        with self._cond:
            queued = list(self._waiting)
            self._waiting.clear()
        for seq in [*self._running, *queued]:
            self._finish(seq, FinishReason.abort)

    def _apply_weights(self, state: Mapping[str, Tensor]) -> int:
        with torch.no_grad():
            self._model.load_state_dict(state, strict=False)
        self._weights = ModelWeights.from_hf(self._model, self.max_model_len)  # re-fuse q/k/v and gate/up
        if self._prefix_cache is not None:
            self._prefix_cache.clear()  # keys/values computed with the old weights
        self._version += 1
        return self._version

    def _shutdown(self) -> None:
        self._abort_all()
        with self._cond:
            ops = list(self._ops)
            self._ops.clear()
        for _, future in ops:
            future.set_exception(RuntimeError("engine is closed"))


def _resolve(future: asyncio.Future[Completion], result: Completion | BaseException) -> None:
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


def _read_state_dict(directory: str | os.PathLike[str]) -> dict[str, Tensor]:
    """All tensors of the *.safetensors files of a checkpoint folder (one or many shards)."""
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise EngineRequestError(f"no *.safetensors weights in {directory}")
    state: dict[str, Tensor] = {}
    for file in files:
        state.update(load_file(file))
    return state
