"""What the synchronous and the fully-async loop share: task selection, the seeded task cursor, group rollouts,
per-step records and the policy / trainer / engine set-up with resume.

Task order (``task_at``): epoch e = i // N is a permutation of the N tasks drawn by ``random.Random(f"{seed}:{e}")``;
position i of the stream is task ``perm_e[i mod N]``. The cursor is just the integer i, so a checkpoint that stores it
resumes the exact same stream.

Sampling seeds (``group_seed``): the harness derives one seed per (sample, turn) from a base seed; each group gets its
own base ``seed·P² + position·P + 1`` (P = 1 000 003) so that two visits of a task in different epochs draw differently.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from envs.errors import RecipeError
from envs.files import atomic_write_text
from envs.harness.agent import EnvFactory, HarnessConfig, run_group
from envs.harness.engine_client import CompletionEngine
from envs.harness.policy import PolicyHarness
from envs.rollout import local_envs
from envs.types import ErrorClass, Split, TaskSpec, Tier, Trajectory
from trainer.algorithms import AlgorithmConfig
from trainer.engine import Engine, EngineConfig
from trainer.local import EmptyBatchError, LocalTrainer, TrainBatch, TrainerConfig, load_latest_checkpoint
from trainer.local.checkpoint import POLICY_DIR, CheckpointInfo
from trainer.model import load_policy

CHECKPOINTS = "checkpoints"
HISTORY_FILE = "history.json"
_PRIME = 1_000_003

OnStep = Callable[["StepRecord"], None]
"""Called after each optimizer step with its record."""
OnRollouts = Callable[[int, list[Trajectory]], None]
"""Called after each optimizer step with the rollouts generated since the previous one (their step number first)."""

EnvsFor = Callable[[TaskSpec], EnvFactory]
"""task → the environment factory of its group (default: ``local_envs`` over the configured apps)."""


class TaskFilter(BaseModel):
    """Which tasks a loop trains on: every given condition must hold (None: no condition)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tier: Tier | None = Tier.TOY
    split: Split | None = Split.TRAIN
    ids: tuple[str, ...] | None = None
    limit: int | None = Field(None, ge=1, description="keep the first N matching tasks (in the given order)")

    def select(self, tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
        chosen = [
            t
            for t in tasks
            if (self.tier is None or t.tier == self.tier)
            and (self.split is None or t.split == self.split)
            and (self.ids is None or t.task_id in self.ids)
        ]
        if self.ids is not None:
            missing = sorted(set(self.ids) - {t.task_id for t in chosen})
            if missing:
                raise ValueError(f"task filter ids not found among the tier/split-matching tasks: {missing[:10]}")
        chosen = chosen[: self.limit]
        if not chosen:
            raise ValueError(f"no task matches the filter tier={self.tier} split={self.split} ids={self.ids}")
        return chosen


def task_at(position: int, n_tasks: int, seed: int) -> int:
    """Index of the task at stream ``position`` (see the module docstring): a fresh seeded permutation per epoch."""
    if n_tasks < 1 or position < 0:
        raise ValueError(f"need n_tasks ≥ 1 and position ≥ 0, got {n_tasks} and {position}")
    epoch, offset = divmod(position, n_tasks)
    order = list(range(n_tasks))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order[offset]


def group_seed(seed: int, position: int) -> int:
    """Base sampling seed of the group at stream ``position``: seed·P² + position·P + 1 mod 2⁶³."""
    return (seed * _PRIME * _PRIME + position * _PRIME + 1) % (1 << 63)


def trainable(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """Drop rollouts that are no outcome of the policy (infra failures, broken tasks): they are re-run, not learned."""
    return [t for t in trajectories if t.error_class not in (ErrorClass.RETRYABLE_INFRA, ErrorClass.TASK)]


def has_signal(group: Sequence[Trajectory], algorithm: AlgorithmConfig) -> bool:
    """Whether the zero-variance filter keeps this group: the very check ``TrainBatch`` makes (length shaping first)."""
    if not group:
        return False
    try:
        TrainBatch.from_trajectories(group, algorithm)
    except EmptyBatchError:
        return False
    return True


async def rollout_group(
    task: TaskSpec,
    position: int,
    envs_for: EnvsFor,
    engine: CompletionEngine,
    tokenizer: PreTrainedTokenizerBase,
    harness: HarnessConfig,
    *,
    seed: int,
    n: int,
) -> list[Trajectory]:
    """``n`` rollouts of the task at stream ``position``, with the group's own sampling seed; trainable ones only."""
    config = harness.model_copy(update={"seed": group_seed(seed, position)})
    group_id = f"p{position}-{task.task_id}"
    group = await run_group(task, envs_for(task), engine, tokenizer, config, group_id=group_id, n=n)
    return trainable(group)


def default_envs(worlds_root: Path, apps: Sequence[str] | None) -> EnvsFor:
    return lambda task: local_envs(task, worlds_root, apps)


async def sample_groups(
    tasks: Sequence[TaskSpec],
    envs_for: EnvsFor,
    engine: CompletionEngine,
    tokenizer: PreTrainedTokenizerBase,
    harness: HarnessConfig,
    *,
    n: int,
    seed: int,
) -> list[list[Trajectory]]:
    """``n`` sampled rollouts of every task (trainable ones), seeds fixed by (seed, task index); off the stream."""
    return await asyncio.gather(
        *(
            rollout_group(task, -1 - index, envs_for, engine, tokenizer, harness, seed=seed, n=n)
            for index, task in enumerate(tasks)
        )
    )


async def evaluate_reward(
    tasks: Sequence[TaskSpec],
    envs_for: EnvsFor,
    engine: CompletionEngine,
    tokenizer: PreTrainedTokenizerBase,
    harness: HarnessConfig,
    *,
    n: int,
    seed: int,
) -> tuple[float, float]:
    """(mean reward, pass rate) over ``n`` sampled rollouts of each task (``sample_groups``)."""
    groups = await sample_groups(tasks, envs_for, engine, tokenizer, harness, n=n, seed=seed)
    flat = [t for group in groups for t in group]
    if not flat:
        raise RuntimeError("every evaluation rollout failed for infra or task reasons")
    return sum(t.reward for t in flat) / len(flat), sum(t.passed for t in flat) / len(flat)


async def tasks_with_variance(
    tasks: Sequence[TaskSpec],
    envs_for: EnvsFor,
    engine: CompletionEngine,
    tokenizer: PreTrainedTokenizerBase,
    harness: HarnessConfig,
    *,
    n: int,
    seed: int,
) -> list[TaskSpec]:
    """Tasks whose ``n`` rollouts' rewards spread (max > min): the ones a group can learn from — the recipe's rule
    for the overfit subset ("tasks with non-zero reward variance")."""
    groups = await sample_groups(tasks, envs_for, engine, tokenizer, harness, n=n, seed=seed)
    return [t for t, g in zip(tasks, groups, strict=True) if g and max(r.reward for r in g) > min(r.reward for r in g)]


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
    seed: int = 0
    # --- advanced -----------------------------------------------------------------------------------------------
    eval_every: int = Field(0, ge=0)
    """Evaluate every N steps (0: never) on the first ``eval_tasks`` selected tasks, ``eval_samples`` each."""
    eval_tasks: int = Field(16, ge=1)
    eval_samples: int = Field(4, ge=1)
    checkpoint_every: int = Field(5, ge=0)
    """Checkpoint every N steps and at the end (0: only at the end)."""
    max_num_seqs: int = Field(128, ge=1)
    """Engine KV slots (concurrent sequences)."""

    def engine_config(self) -> EngineConfig:
        return EngineConfig(max_num_seqs=self.max_num_seqs, max_model_len=self.harness.context_budget_tokens)

    def policy_harness(self) -> PolicyHarness:
        """The harness settings every checkpoint's policy folder carries (``harness.json``)."""
        return PolicyHarness.from_training(self.harness, self.apps)

    def checkpoint_due(self, step: int) -> bool:
        return step == self.steps or (self.checkpoint_every > 0 and step % self.checkpoint_every == 0)

    def eval_due(self, step: int) -> bool:
        return self.eval_every > 0 and (step % self.eval_every == 0 or step == self.steps)


class StepRecord(BaseModel):
    """One loop step. Rewards are over the rollouts the step generated (sync), or those that finished since the
    previous step (async; the step's trained rollouts when none did)."""

    model_config = ConfigDict(extra="forbid")

    step: int
    wall_s: float
    """Seconds since the loop started (evaluation time excluded), cumulative over resumes."""
    reward_mean: float
    pass_rate: float
    trajectories: int
    groups_dropped: int
    """Groups without signal (all rewards tie), dropped."""
    trained: bool
    groups_stale: int = 0
    """Async: groups dropped at the trainer because their staleness would exceed the bound S."""
    generate_s: float = 0.0
    train_s: float = 0.0
    sync_s: float = 0.0
    wait_s: float = 0.0
    """Async: trainer idle time waiting for the generation buffer (wait_for_generation_buffer)."""
    staleness_mean: float = 0.0
    staleness_max: int = 0
    tokens_per_s: float = 0.0
    """Generated (loss-masked) tokens per wall second over this step."""
    loss: float | None = None
    logprob_abs_diff_mean: float | None = None
    positions: list[int] = Field(default_factory=list)
    """Stream positions of the groups this step used (the cursor trail)."""
    eval_reward: float | None = None
    eval_pass_rate: float | None = None


class ResumeError(RecipeError):
    """A run folder whose resume state is damaged; the message names the file."""


class LoopHistory(BaseModel):
    """Every step so far, written atomically to ``<out_dir>/history.json`` after each step."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    steps: list[StepRecord] = Field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return self.steps[-1].wall_s if self.steps else 0.0

    def save(self, out_dir: Path) -> None:
        atomic_write_text(out_dir / HISTORY_FILE, self.model_dump_json(indent=1))  # fsynced, then renamed

    @classmethod
    def resume(cls, out_dir: Path, kind: str, step: int) -> LoopHistory:
        """The saved history up to ``step`` (a checkpoint's step), or a fresh one; ``ResumeError`` naming the file
        when it is damaged."""
        path = out_dir / HISTORY_FILE
        if step == 0 or not path.is_file():
            return cls(kind=kind)
        try:
            saved = cls.model_validate_json(path.read_bytes())
        except (ValidationError, OSError) as error:
            reason = str(error).splitlines()[0][:200]
            raise ResumeError(
                f"the step history {path} is damaged ({reason}); move it aside to resume without the records of the "
                "earlier steps"
            ) from None
        if saved.kind != kind:
            raise ValueError(f"{out_dir} holds a {saved.kind!r} loop run, not a {kind!r} one")
        return cls(kind=kind, steps=[r for r in saved.steps if r.step <= step])


@dataclass
class Policy:
    """The trainer's model, the engine's separate copy (the trainer updates in place; the engine must not see a
    half-updated tensor), the tokenizer, and where a resume left off."""

    trainer: LocalTrainer
    engine: Engine
    tokenizer: PreTrainedTokenizerBase
    resumed: CheckpointInfo | None

    def close(self) -> None:
        self.engine.close()


def open_trainer(
    policy_dir: Path, trainer_config: TrainerConfig, out_dir: Path
) -> tuple[LocalTrainer, PreTrainedTokenizerBase, CheckpointInfo | None]:
    """A trainer on the policy, restored from the newest checkpoint under ``out_dir`` that loads (a damaged one is
    moved aside with a warning: ``load_latest_checkpoint``), when there is one."""
    model: PreTrainedModel
    model, tokenizer = load_policy(policy_dir)
    trainer = LocalTrainer(model, trainer_config)
    return trainer, tokenizer, load_latest_checkpoint(out_dir / CHECKPOINTS, trainer)


def engine_weights(policy_dir: Path, resumed: CheckpointInfo | None) -> Path:
    """Where the engine loads from: the checkpoint's policy when resuming, else the base policy."""
    return resumed.path / POLICY_DIR if resumed is not None else policy_dir


def open_engine(weights: Path, engine_config: EngineConfig) -> Engine:
    """An engine on its own copy of the weights in ``weights`` (a policy folder)."""
    model, tokenizer = load_policy(weights)
    return Engine(model, tokenizer, engine_config)


def open_policy(policy_dir: Path, trainer_config: TrainerConfig, out_dir: Path, engine_config: EngineConfig) -> Policy:
    """Trainer and engine on two copies of the policy, resumed from ``out_dir``'s newest checkpoint if any."""
    trainer, tokenizer, resumed = open_trainer(policy_dir, trainer_config, out_dir)
    return Policy(trainer, open_engine(engine_weights(policy_dir, resumed), engine_config), tokenizer, resumed)


def generated_tokens(trajectories: Sequence[Trajectory]) -> int:
    return sum(sum(t.loss_mask) for t in trajectories)
