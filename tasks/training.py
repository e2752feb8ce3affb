"""Training tasks: the synchronous or fully-async loop, run where the profile's trainer backend puts it, recorded in the
catalog.

``train`` runs (or resumes, from the newest checkpoint under ``out_dir``) one loop through a ``TrainerRunner``, holding
a slot of the global concurrency limit ``gpu`` (``tasks.concurrency``) while it trains: ``run_locally`` in this
process (the local trainer; generation on an in-process engine or on the loop's engine servers), or a Ray Job on the
cluster (``tasks.cluster.RayJobRunner``). Either way every step (``train_steps``) and every rollout the loop generated
(``trajectories``, with the step) reach the catalog as they happen, with a progress artifact (under the stage's
injected faults, ``StageScope.faults``); it returns the loop's history and the final policy folder (the last
checkpoint's ``policy/``, which carries the harness it was trained with).

    config = loop_config(LoopKind.SYNC, task_ids=ids, settings=settings, trainer=TrainerConfig(lr=1e-4), ...)
    scope = StageScope(catalog, "overfit", "4-overfit", worlds)
    result = train(scope, TrainJob("overfit", base_dir, tasks, config, out_dir))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from prefect import task
from prefect.cache_policies import NO_CACHE

from envs.harness.policy import PolicyHarness
from envs.types import TaskSpec, Trajectory
from tasks.artifacts import ProgressArtifact
from tasks.concurrency import gpu_slot
from tasks.context import StageScope
from trainer.local import RetentionConfig, TrainerConfig, latest_checkpoint
from trainer.local.checkpoint import POLICY_DIR
from trainer.loops import AsyncLoopConfig, LoopHistory, RuntimeKind, StepRecord, SyncLoopConfig, TaskFilter
from trainer.loops.config import LoopConfig
from trainer.loops.kinds import LoopKind
from trainer.loops.policy import CHECKPOINTS
from trainer.specs import RetentionSource
from trainer.vllm.remote import RemoteEngines


class RetentionSettings(Protocol):
    """What ``retention_set`` reads of a stage's retention section (``flows.config.HeroRetention``)."""

    coef: float
    examples_per_step: int
    sources: tuple[RetentionSource, ...]
    per_source: int | None


@dataclass(frozen=True)
class TrainResult:
    history: LoopHistory
    policy: Path
    """The final checkpoint's policy folder."""


def loop_config(
    kind: LoopKind,
    *,
    task_ids: Sequence[str],
    settings: PolicyHarness,
    trainer: TrainerConfig,
    prompts_per_step: int,
    samples_per_prompt: int,
    steps: int,
    seed: int,
    checkpoint_every: int,
    max_num_seqs: int,
    workers: int = 8,
    max_staleness: int = 1,
    runtime: RuntimeKind = RuntimeKind.ASYNCIO,
) -> LoopConfig:
    """The loop's config over exactly ``task_ids`` with the policy's harness and apps."""
    common = {
        "prompts_per_step": prompts_per_step,
        "samples_per_prompt": samples_per_prompt,
        "steps": steps,
        "tasks": TaskFilter(tier=None, split=None, ids=tuple(task_ids)),
        "harness": settings.harness,
        "trainer": trainer,
        "apps": settings.apps,
        "terminal_max_tokens_per_turn": settings.terminal_max_tokens_per_turn,
        "seed": seed,
        "checkpoint_every": checkpoint_every,
        "max_num_seqs": max_num_seqs,
    }
    if kind is LoopKind.SYNC:
        return SyncLoopConfig(**common)
    return AsyncLoopConfig(**common, workers=workers, max_staleness=max_staleness, runtime=runtime)


def step_row(stage: str, label: str, record: StepRecord) -> dict:
    # activity and the retention loss stay in history.json: no catalog column
    fields = record.model_dump(exclude={"positions", "activity", "retention_nll"})
    return {"stage": stage, "run": label} | fields


@dataclass(frozen=True)
class TrainJob:
    """One loop to run: ``loop`` from the policy ``policy_dir`` over ``tasks``, its checkpoints under ``out_dir``."""

    label: str
    policy_dir: Path
    tasks: Sequence[TaskSpec]
    loop: LoopConfig
    out_dir: Path
    current_engines: Callable[[], RemoteEngines | None] | None = None
    """The engines the stage would give the loop now (None: ``loop.engines`` never change): asked again before a
    failed job is resubmitted, since the run's fleet restarts elsewhere when an engine's node dies."""


class TrainerRunner(Protocol):
    """Runs one ``TrainJob`` to its end and records it in the scope's catalog (``run_locally``, a Ray Job runner)."""

    def __call__(self, scope: StageScope, job: TrainJob) -> TrainResult: ...


def train_source(label: str) -> str:
    """The ``trajectories.source`` of a training loop's rollouts."""
    return f"train/{label}"


def final_policy(out_dir: Path, label: str) -> Path:
    """The newest checkpoint's policy folder under ``out_dir`` (what a finished loop hands on)."""
    final = latest_checkpoint(out_dir / CHECKPOINTS)
    if final is None:
        raise RuntimeError(f"the {label} loop wrote no checkpoint under {out_dir / CHECKPOINTS}")
    return final / POLICY_DIR


def run_locally(scope: StageScope, job: TrainJob) -> TrainResult:
    """The loop in this process: the local trainer, generation where ``job.loop.engines`` says."""
    import torch

    from trainer.loops import LoopHooks, LoopJob, run_async_loop, run_sync_loop

    torch.set_num_threads(1)  # tiny models: one thread each for the engine and the trainer beats contention
    catalog, stage, label, config, out_dir = scope.catalog, scope.stage, job.label, job.loop, job.out_dir
    by_id = {t.task_id: t for t in job.tasks}
    if scope.faults is not None:
        config = config.model_copy(update={"faults": scope.faults})
    run = run_async_loop if isinstance(config, AsyncLoopConfig) else run_sync_loop
    recorded: set[int] = set()
    with ProgressArtifact(scope.folder, f"train-{label}", total=config.steps) as progress:

        def on_step(record: StepRecord) -> None:
            catalog.append("train_steps", [step_row(stage, label, record)])
            recorded.add(record.step)
            progress.advance(f"reward {record.reward_mean:.3f}", to=record.step)

        def on_rollouts(step: int, trajectories: list[Trajectory]) -> None:
            catalog.add_trajectories(stage, train_source(label), label, trajectories, by_id, step=step)

        loop_job = LoopJob(job.policy_dir, job.tasks, scope.worlds, out_dir, LoopHooks(on_step, on_rollouts))
        history = run(loop_job, config)
    # Steps done before a resume (a killed run's checkpoint) are in the history, not yet in this catalog.
    earlier = [step_row(stage, label, r) for r in history.steps if r.step not in recorded]
    catalog.append("train_steps", earlier)
    return TrainResult(history, final_policy(out_dir, label))


@task(name="train", cache_policy=NO_CACHE, task_run_name="train-{job.label}")
def train(scope: StageScope, job: TrainJob, runner: TrainerRunner = run_locally) -> TrainResult:
    """Run (or resume, from the newest checkpoint in ``job.out_dir``) the loop ``job.loop`` through ``runner``,
    holding a ``gpu`` slot; every step and every rollout goes to the catalog."""
    with gpu_slot(f"train-{job.label}"):
        return runner(scope, job)


@task(name="retention-set", cache_policy=NO_CACHE)
def retention_set(policy: Path, data: Path, out: Path, settings: RetentionSettings, seed: int) -> RetentionConfig:
    """The base's retention set (``trainer.retention``) written to ``out``, as the trainer's PPO-ptx config."""
    from trainer.retention import write_retention_file  # the bootstrap's modules: only a stage that replays needs them

    counts = write_retention_file(policy, data, out, settings.sources, settings.per_source, seed)
    print(f"retention set: {sum(counts.values())} examples of the base ({counts}) in {out}; coef {settings.coef:g}")
    return RetentionConfig(path=str(out), coef=settings.coef, examples_per_step=settings.examples_per_step)
