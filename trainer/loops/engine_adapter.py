"""Weight sync between the trainer and the engine that generates rollouts: one ``WeightSync`` protocol, two backends.

* ``InProcessEngine(engine)`` — our ``trainer.engine.Engine`` in this process. It is also the harness's
  ``CompletionEngine`` (``EngineCompletions``: no HTTP, the fastest path on 2 cores), and a weight push hands the
  trainer's state dict straight to ``Engine.update_weights``.
* ``HttpEngineControl(base_url, staging_dir)`` — a remote vLLM-compatible engine driven through its control routes
  (``/pause?mode=keep``, ``/update_weights`` with a folder of safetensors, ``/resume``), each with a timeout and the
  engine's control token (``$RL_RECIPE_ENGINE_TOKEN`` unless given). The weights are staged as
  ``<staging_dir>/v<n>/model.safetensors`` (atomic rename), so the engine must see that folder.

A push in flight (RECIPE "Fully-async RL") is ``push_weights``: pause in keep mode (running requests freeze with their
KV cache), load the weights, resume — resume always runs, even when the load failed, so generation never stalls.

    sync = InProcessEngine(engine)
    version = await push_weights(sync, trainer)        # pause(keep) → update_weights → resume
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Protocol

import httpx
from safetensors.torch import save_file
from torch import Tensor

from trainer.engine import Engine, PauseMode
from trainer.engine.types import CONTROL_TOKEN_ENV
from trainer.rollout_eval import EngineCompletions


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

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)

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
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
            headers={"Authorization": f"Bearer {token}"} if token else None,
        )

    async def __aenter__(self) -> HttpEngineControl:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

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

    async def _post(self, path: str, **kwargs: object) -> dict:
        try:
            response = await self._http.post(path, **kwargs)
        except httpx.HTTPError as error:
            raise EngineControlError(f"{path}: {type(error).__name__}: {error}") from error
        if response.status_code >= 400:
            raise EngineControlError(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
        return response.json()


def stage_weights(state: dict[str, Tensor], staging_dir: Path, version: int) -> Path:
    """Write ``state`` as ``<staging_dir>/v<version>/model.safetensors`` via a temp folder renamed into place."""
    staging_dir.mkdir(parents=True, exist_ok=True)
    target = staging_dir / f"v{version}"
    tmp = Path(tempfile.mkdtemp(dir=staging_dir, prefix=f".{target.name}-"))
    save_file({name: tensor.contiguous() for name, tensor in state.items()}, tmp / "model.safetensors")
    os.replace(tmp, target)
    return target


async def push_weights(sync: WeightSync, source: WeightSource) -> int:
    """pause(keep) → update_weights → resume; resume runs even if the update raised. Returns the new version."""
    await sync.pause()
    try:
        return await sync.update_weights(source)
    finally:
        await sync.resume()
