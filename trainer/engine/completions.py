"""Our in-process engine as the harness's ``CompletionEngine``: the calls ``CompletionsClient`` makes over HTTP,
minus the socket (the fastest rollout path on 2 cores).

``trainer.loops.engine_adapter.InProcessEngine`` extends it with weight sync; ``trainer.rollout_eval`` and
``tasks.engine`` roll out through it.

    completion = await EngineCompletions(engine).complete(prompt_ids, Sampling(max_tokens=256, seed=0))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from envs.harness.engine_client import Completion, Sampling
from trainer.engine.engine import Engine
from trainer.engine.types import SamplingParams


class EngineCompletions:
    """``CompletionEngine`` over an in-process ``Engine``: token ids in, sampled ids + logprobs out."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion:
        params = SamplingParams(**asdict(sampling))  # the same fields, by design: vLLM's names
        done = await self.engine.generate(prompt_ids, params)
        return Completion(done.token_ids_T, done.logprobs_T, str(done.finish_reason), done.weight_version)
