"""Our engine in this process as the loops' ``CompletionEngine`` and ``WeightSync``: ``InProcessEngine``.

It is the harness's completions over ``trainer.engine.Engine`` (``EngineCompletions``: no HTTP, the fastest path on 2
cores), and a weight push hands the trainer's state dict straight to ``Engine.update_weights``. Engines reached over
HTTP (vLLM, or ours behind its server) are ``trainer.vllm.remote.RemoteFleet``; both go through
``trainer.engine.weight_sync.push_weights``.

    sync = InProcessEngine(engine)
    version = await push_weights(sync, trainer)        # pause(keep) → update_weights → resume
"""

from __future__ import annotations

import asyncio

from trainer.engine import PauseMode
from trainer.engine.completions import EngineCompletions
from trainer.engine.weight_sync import WeightSource


class InProcessEngine(EngineCompletions):
    """``CompletionEngine`` and ``WeightSync`` over an in-process ``Engine`` (the blocking calls run in a thread)."""

    async def pause(self) -> None:
        await asyncio.to_thread(self.engine.pause, PauseMode.keep)

    async def update_weights(self, source: WeightSource) -> int:
        return await asyncio.to_thread(self.engine.update_weights, source.state_dict_for_engine())

    async def resume(self) -> None:
        self.engine.resume()
