"""The engines a stage talks to: in-process for rollouts the trainer drives, over HTTP wherever the wire matters.

* ``rollout_engine`` — a ``CompletionEngine`` for a stage's rollouts: the local engine in this process (no socket:
  the fastest path on 2 cores), or a vLLM-compatible URL (backend ``openai``);
* ``policy_endpoint`` — an OpenAI-compatible URL serving a policy folder: the local engine behind its real HTTP
  server on loopback (what evals, the TITO check and the MCQ suite talk to, exactly as they would to vLLM), or the
  configured URL.

    with policy_endpoint(policy_dir, EngineSettings(max_model_len=1024)) as endpoint:
        run_eval(EvalSpec(engine=EngineSpec(base_url=endpoint.url, model=endpoint.model, ...)))
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from envs.faults import FaultPlan
from envs.harness.engine_client import CompletionEngine, CompletionsClient
from envs.net import serve_in_thread
from trainer.engine import Engine, EngineConfig


@dataclass(frozen=True)
class EngineSettings:
    """Where generation runs: ``url`` set → a remote vLLM-compatible engine, else our engine on the policy."""

    max_model_len: int
    max_num_seqs: int = 64
    compile: bool = False
    url: str | None = None
    served_model_name: str | None = None
    timeout_s: float = 600.0

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            max_num_seqs=self.max_num_seqs, max_model_len=self.max_model_len, compile=self.compile, torch_threads=1
        )


@dataclass(frozen=True)
class Endpoint:
    url: str
    model: str
    tokenizer: str
    """Tokenizer folder (the policy folder) the client renders prompts with."""


def load_engine(policy_dir: Path, settings: EngineSettings) -> Engine:
    from trainer.model import load_policy

    model, tokenizer = load_policy(policy_dir)
    return Engine(model, tokenizer, settings.engine_config())


@asynccontextmanager
async def rollout_engine(
    policy_dir: Path, settings: EngineSettings, faults: FaultPlan | None = None
) -> AsyncIterator[CompletionEngine]:
    """The engine a stage's rollouts sample from; closed on exit. ``faults`` (``envs.faults``) go around the
    in-process engine only: a remote engine's failures are its own."""
    if settings.url:
        name = settings.served_model_name or policy_dir.name
        async with CompletionsClient(settings.url, name, timeout_s=settings.timeout_s) as client:
            yield client
        return
    from trainer.engine.completions import EngineCompletions

    engine = load_engine(policy_dir, settings)
    try:
        yield EngineCompletions(engine, faults.injector("engine") if faults else None)
    finally:
        engine.close()


@contextmanager
def policy_endpoint(policy_dir: Path, settings: EngineSettings, name: str | None = None) -> Iterator[Endpoint]:
    """An OpenAI-compatible endpoint serving ``policy_dir`` (or the configured remote engine)."""
    if settings.url:
        yield Endpoint(settings.url, settings.served_model_name or policy_dir.name, str(policy_dir))
        return
    from trainer.engine.server import create_app

    served = name or policy_dir.name
    engine = load_engine(policy_dir, settings)
    try:
        with serve_in_thread(create_app(engine, served)) as url:
            yield Endpoint(url, served, str(policy_dir))
    finally:
        engine.close()
