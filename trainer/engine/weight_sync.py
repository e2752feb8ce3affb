"""Weight sync between a trainer and the engines that generate its rollouts: the two protocols and the push.

A push in flight (RECIPE "Fully-async RL") is ``push_weights``: pause in keep mode (running requests freeze with
their KV cache, or are recomputed after the resume on vLLM), load the weights, resume — resume always runs, even when
the load failed, so generation never stalls. Implementations: ``trainer.loops.engine_adapter.InProcessEngine`` (our
engine in this process) and ``trainer.vllm.remote.RemoteFleet`` (engine servers over HTTP: vLLM, or ours).

    version = await push_weights(sync, trainer)        # pause(keep) → update_weights → resume
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor


class WeightSource(Protocol):
    """What a push reads weights from (``LocalTrainer``, a ``TrainerService``, a trainer process or actor)."""

    def state_dict_for_engine(self) -> dict[str, Tensor]: ...


class WeightSync(Protocol):
    """Control of an engine during a weight push; ``update_weights`` returns the engine's new weights version."""

    async def pause(self) -> None: ...

    async def update_weights(self, source: WeightSource) -> int: ...

    async def resume(self) -> None: ...


async def push_weights(sync: WeightSync, source: WeightSource) -> int:
    """pause(keep) → update_weights → resume; resume runs even if the update raised. Returns the new version."""
    await sync.pause()
    try:
        return await sync.update_weights(source)
    finally:
        await sync.resume()
