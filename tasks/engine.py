"""The engines a stage talks to, by where generation runs (``EngineSettings.source``, an ``EngineBackend``; one
function per backend):

* ``local`` — our engine on the policy in this process: in-process for rollouts the stage drives (no socket: the
  fastest path on 2 cores), behind its real HTTP server on loopback wherever the wire matters (evals, the TITO check,
  the MCQ suite talk to it exactly as they would to vLLM);
* ``openai`` — any vLLM-compatible URL, serving whatever it serves;
* ``vllm`` — the run's vLLM engines (``tasks.fleet``): the policy's weights are loaded into them first (a new folder
  per version), so the base, a checkpoint and a trained policy all run on the same servers.

``rollout_engine`` gives a ``CompletionEngine`` for a stage's rollouts, ``policy_endpoint`` an OpenAI-compatible URL
serving a policy folder, ``training_engines`` what a training loop generates on (None: an engine of its own).

    with policy_endpoint(policy_dir, EngineSettings(max_model_len=1024)) as endpoint:
        run_eval(EvalSpec(engine=EngineSpec(base_url=endpoint.url, model=endpoint.model, ...)))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from envs.faults import FaultPlan
from envs.harness.engine_client import CompletionEngine, CompletionsClient
from envs.net import serve_in_thread
from envs.tokens import bearer_keys
from trainer.backends import EngineBackend
from trainer.engine import Engine, EngineConfig
from trainer.vllm.remote import RemoteEngines, RemoteFleet


class EngineFleet(Protocol):
    """The run's engine servers (``tasks.fleet.VllmFleet``): started or reattached on first use."""

    root: Path
    """The fleet's folder (its records, logs, and the weights a stage loads for its own rollouts and evals)."""

    def engines(self, staging: Path) -> RemoteEngines: ...


@dataclass(frozen=True)
class EngineSettings:
    """Where generation runs: ``url`` set → a remote vLLM-compatible engine, else our engine on the policy."""

    max_model_len: int
    max_num_seqs: int = 64
    compile: bool = False
    url: str | None = None
    api_key_file: Path | None = None
    """The bearer token of the engine at ``url``, in a file (an engine behind ``trainer.vllm.gate``)."""
    served_model_name: str | None = None
    timeout_s: float = 600.0
    fleet: EngineFleet | None = None
    """The run's vLLM engines (backend ``vllm``); takes precedence over ``url``."""

    @property
    def source(self) -> EngineBackend:
        """Where generation runs (module docstring): the run's fleet, else the configured URL, else our engine."""
        if self.fleet is not None:
            return EngineBackend.VLLM
        return EngineBackend.OPENAI if self.url else EngineBackend.LOCAL

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            max_num_seqs=self.max_num_seqs, max_model_len=self.max_model_len, compile=self.compile, torch_threads=1
        )

    def fleet_engines(self) -> RemoteEngines:
        """The fleet's engines, loading into the fleet's own weights folder (a stage's rollouts and evals)."""
        assert self.fleet is not None
        return self.fleet.engines(self.fleet.root / "weights").model_copy(update={"timeout_s": self.timeout_s})


@dataclass(frozen=True)
class Endpoint:
    url: str
    model: str
    tokenizer: str
    """Tokenizer folder (the policy folder) the client renders prompts with."""
    api_key_file: Path | None = None
    """The engines' token file when they want one (the run's fleet, ``trainer.vllm.gate``)."""


def load_engine(policy_dir: Path, settings: EngineSettings) -> Engine:
    from trainer.model import load_policy

    model, tokenizer = load_policy(policy_dir)
    return Engine(model, tokenizer, settings.engine_config())


@asynccontextmanager
async def _local_rollouts(policy_dir: Path, settings: EngineSettings, faults: FaultPlan | None):
    from trainer.engine.completions import EngineCompletions

    engine = load_engine(policy_dir, settings)
    try:
        yield EngineCompletions(engine, faults.injector("engine") if faults else None)
    finally:
        engine.close()


@asynccontextmanager
async def _url_rollouts(policy_dir: Path, settings: EngineSettings, faults: FaultPlan | None):
    name = settings.served_model_name or policy_dir.name
    keys = bearer_keys(settings.api_key_file)
    async with CompletionsClient(settings.url or "", name, timeout_s=settings.timeout_s, keys=keys) as client:
        yield client


@asynccontextmanager
async def _fleet_rollouts(policy_dir: Path, settings: EngineSettings, faults: FaultPlan | None):
    engines = await asyncio.to_thread(settings.fleet_engines)
    async with RemoteFleet(engines, faults.injector("engine") if faults else None) as fleet:
        await fleet.load(policy_dir)
        yield fleet


ROLLOUT_ENGINES: dict[EngineBackend, Callable[..., AbstractAsyncContextManager[Any]]] = {
    EngineBackend.LOCAL: _local_rollouts,
    EngineBackend.OPENAI: _url_rollouts,
    EngineBackend.VLLM: _fleet_rollouts,
}


def rollout_engine(
    policy_dir: Path, settings: EngineSettings, faults: FaultPlan | None = None
) -> AbstractAsyncContextManager[CompletionEngine]:
    """The engine a stage's rollouts sample from (by ``settings.source``); closed on exit. ``faults``
    (``envs.faults``) go around our engines (in process, or the fleet's); a configured URL's failures are its own."""
    return ROLLOUT_ENGINES[settings.source](policy_dir, settings, faults)


@contextmanager
def _local_endpoint(policy_dir: Path, settings: EngineSettings, name: str | None) -> Iterator[Endpoint]:
    from trainer.engine.server import create_app

    served = name or policy_dir.name
    engine = load_engine(policy_dir, settings)
    try:
        with serve_in_thread(create_app(engine, served)) as url:
            yield Endpoint(url, served, str(policy_dir))
    finally:
        engine.close()


@contextmanager
def _url_endpoint(policy_dir: Path, settings: EngineSettings, name: str | None) -> Iterator[Endpoint]:
    name = settings.served_model_name or policy_dir.name
    yield Endpoint(settings.url or "", name, str(policy_dir), settings.api_key_file)


@contextmanager
def _fleet_endpoint(policy_dir: Path, settings: EngineSettings, name: str | None) -> Iterator[Endpoint]:
    engines = settings.fleet_engines()

    async def load() -> None:
        async with RemoteFleet(engines) as fleet:
            await fleet.load(policy_dir)

    asyncio.run(load())
    yield Endpoint(engines.urls[0], engines.model, str(policy_dir), engines.token_file)


ENDPOINTS: dict[EngineBackend, Callable[..., AbstractContextManager[Endpoint]]] = {
    EngineBackend.LOCAL: _local_endpoint,
    EngineBackend.OPENAI: _url_endpoint,
    EngineBackend.VLLM: _fleet_endpoint,
}


def policy_endpoint(
    policy_dir: Path, settings: EngineSettings, name: str | None = None
) -> AbstractContextManager[Endpoint]:
    """An OpenAI-compatible endpoint serving ``policy_dir`` (by ``settings.source``; ``name``: the served name of our
    local engine)."""
    return ENDPOINTS[settings.source](policy_dir, settings, name)


def training_engines(settings: EngineSettings, staging: Path) -> RemoteEngines | None:
    """What a training loop generates on: the fleet's engines (weights pushed through ``staging``), or None — an
    engine of the loop's own (a configured URL serves evals only: it has no weight routes we can rely on)."""
    return settings.fleet.engines(staging) if settings.fleet is not None else None
