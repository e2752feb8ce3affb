"""Our in-process engine as the harness's ``CompletionEngine``: the calls ``CompletionsClient`` makes over HTTP,
minus the socket (the fastest rollout path on 2 cores).

``trainer.loops.engine_adapter.InProcessEngine`` extends it with weight sync; ``trainer.rollout_eval`` and
``tasks.engine`` roll out through it.

With a fault injector (``envs.faults``), a request may fail as the HTTP client's would — a dropped connection or an
HTTP 500, raised as a retryable ``EngineError`` — or stall, and then every request is bounded by the plan's
``timeout_s``: a stall past it is a retryable ``EngineError`` too, never a rollout that waits forever.

    completion = await EngineCompletions(engine).complete(prompt_ids, Sampling(max_tokens=256, seed=0))
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict

from envs.faults import ENGINE_FAULTS, FaultInjector, FaultKind
from envs.harness.engine_client import Completion, EngineError, Sampling
from trainer.engine.engine import Engine
from trainer.engine.types import SamplingParams

_INJECTED_ERRORS = {
    FaultKind.ENGINE_DROP: "injected fault: the engine dropped the connection (RemoteProtocolError)",
    FaultKind.ENGINE_500: "injected fault: HTTP 500 from the engine",
}


class EngineCompletions:
    """``CompletionEngine`` over an in-process ``Engine``: token ids in, sampled ids + logprobs out."""

    def __init__(self, engine: Engine, faults: FaultInjector | None = None) -> None:
        self.engine = engine
        self.faults = faults

    async def complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion:
        if self.faults is None:
            return await self._complete(prompt_ids, sampling)
        kind = self.faults.pick(ENGINE_FAULTS)
        if kind in _INJECTED_ERRORS:
            raise EngineError(_INJECTED_ERRORS[kind], retryable=True)
        timeout_s = self.faults.plan.timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                if kind is FaultKind.ENGINE_STALL:
                    await asyncio.sleep(self.faults.plan.stall_s)
                return await self._complete(prompt_ids, sampling)
        except TimeoutError as error:
            raise EngineError(f"no completion within {timeout_s:g} s (the engine stalled)", retryable=True) from error

    async def _complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion:
        params = SamplingParams(**asdict(sampling))  # the same fields, by design: vLLM's names
        done = await self.engine.generate(prompt_ids, params)
        return Completion(done.token_ids_T, done.logprobs_T, str(done.finish_reason), done.weight_version)
