"""Weight sync between the trainer and the engine that generates rollouts: one ``WeightSync`` protocol, two backends.

* ``InProcessEngine(engine)`` — our ``trainer.engine.Engine`` in this process. It is also the harness's
  ``CompletionEngine`` (``EngineCompletions``: no HTTP, the fastest path on 2 cores), and a weight push hands the
  trainer's state dict straight to ``Engine.update_weights``.
* ``HttpEngineControl(base_url, staging_dir)`` — a remote vLLM-compatible engine driven through its control routes
  (``/pause?mode=keep``, ``/update_weights`` with a folder of safetensors, ``/resume``) through
  ``envs.openai_http.ApiClient`` (a timeout on each call), with the engine's control token
  (``$RL_RECIPE_ENGINE_TOKEN`` unless given). The weights are staged as
  ``<staging_dir>/v<n>/model.safetensors`` (atomic rename), so the engine must see that folder.

A push in flight (RECIPE "Fully-async RL") is ``push_weights``: pause in keep mode (running requests freeze with their
KV cache), load the weights, resume — resume always runs, even when the load failed, so generation never stalls.

    sync = InProcessEngine(engine)
    version = await push_weights(sync, trainer)        # pause(keep) → update_weights → resume
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Protocol

import httpx
from pydantic import SecretStr
from safetensors.torch import save_file
from torch import Tensor

from envs.files import staged_dir
from envs.openai_http import ApiClient, ApiError
from trainer.engine import PauseMode
from trainer.engine.completions import EngineCompletions
from trainer.engine.types import CONTROL_TOKEN_ENV


class WeightSource(Protocol):
    """What a push reads weights from (``LocalTrainer`` or a Ray trainer actor's snapshot)."""

    def state_dict_for_engine(self) -> dict[str, Tensor]: ...


class WeightSync(Protocol):
    """Control of an engine during a weight push; ``update_weights`` returns the engine's new weights version."""

    async def pause(self) -> None: ...

    async def update_weights(self, source: WeightSource) -> int: ...

    async def resume(self) -> None: ...


class InProcessEngine(EngineCompletions):
    """``CompletionEngine`` and ``WeightSync`` over an in-process ``Engine`` (the blocking calls run in a thread)."""

    async def pause(self) -> None:
        await asyncio.to_thread(self.engine.pause, PauseMode.keep)

    async def update_weights(self, source: WeightSource) -> int:
        return await asyncio.to_thread(self.engine.update_weights, source.state_dict_for_engine())

    async def resume(self) -> None:
        self.engine.resume()


class EngineControlError(RuntimeError):
    """A control route of the remote engine failed or timed out."""


class HttpEngineControl:
    """``WeightSync`` over a vLLM-compatible engine's control routes; use as an async context manager."""

    def __init__(
        self,
        base_url: str,
        staging_dir: str | os.PathLike[str],
        timeout_s: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
        token: str | None = None,
    ) -> None:
        self.staging_dir = Path(staging_dir)
        self._pushes = 0
        token = token or os.environ.get(CONTROL_TOKEN_ENV)
        self._api = ApiClient(base_url, timeout_s, keys=[SecretStr(token)] if token else (), transport=transport)

    async def __aenter__(self) -> HttpEngineControl:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._api.aclose()

    async def pause(self) -> None:
        await self._post("/pause", params={"mode": PauseMode.keep.value})

    async def update_weights(self, source: WeightSource) -> int:
        self._pushes += 1
        folder = await asyncio.to_thread(stage_weights, source.state_dict_for_engine(), self.staging_dir, self._pushes)
        reply = await self._post("/update_weights", json={"path": str(folder)})
        if "version" not in reply:
            raise EngineControlError(f"/update_weights reply has no 'version': {str(reply)[:200]}")
        return int(reply["version"])

    async def resume(self) -> None:
        await self._post("/resume")

    async def _post(
        self, path: str, json: dict[str, Any] | None = None, params: dict[str, str] | None = None
    ) -> dict[str, Any]:
        try:
            return await self._api.post_json(path, json, params=params)
        except ApiError as error:
            raise EngineControlError(str(error)) from error


def stage_weights(state: dict[str, Tensor], staging_dir: Path, version: int) -> Path:
    """Write ``state`` as ``<staging_dir>/v<version>/model.safetensors`` via a temp folder swapped into place
    (``staged_dir``): the engine never loads half a file."""
    target = staging_dir / f"v{version}"
    with staged_dir(target) as tmp:
        save_file({name: tensor.contiguous() for name, tensor in state.items()}, tmp / "model.safetensors")
    return target


async def push_weights(sync: WeightSync, source: WeightSource) -> int:
    """pause(keep) → update_weights → resume; resume runs even if the update raised. Returns the new version."""
    await sync.pause()
    try:
        return await sync.update_weights(source)
    finally:
        await sync.resume()
