"""The synchronous RL loop: generate a batch with the current weights, train one step on it, push the weights.

One step:

1. positions cursor … cursor + B − 1 of the seeded task stream (``stream.task_at``) pick B tasks;
2. ``run_group`` per task, all B groups at once, n samples each, against the loop's engine
   (``trainer.loops.generation``: in process, or engine servers); a rollout an infra
   fault ended is re-run (``Rollouts.run``), and a group whose generation dies is generated again (at most
   ``MAX_REQUEUES`` times, as the async loop re-queues a dead worker's position);
3. every rollout is recorded (``hooks.rollouts``; infra failures with their error class), and
   ``TrainBatch.from_trajectories`` trains on the ``trainable`` ones (zero-variance groups dropped; a step whose
   groups all tie trains nothing);
4. ``LocalTrainer.train_step`` — one AdamW step on the whole batch;
5. ``push_weights`` — the engine gets the new weights (pause(keep) → update → resume; nothing is in flight here);
6. a ``StepRecord`` (reward mean and pass rate of the step's rollouts; generate / train / sync seconds), an optional
   evaluation, and every ``checkpoint_every`` steps a checkpoint that stores the cursor — a rerun with the same
   ``out_dir`` resumes from the newest one and replays the exact task stream.

With ``config.faults`` on (``envs.faults``), the engine's completions go through the fault injector and group
generation may crash (``worker_crash``), as in the async loop.

    job = LoopJob(Path("models/base/<hash>"), load_tasks(Path("data")), Path("data/worlds"), Path("runs/sync"))
    history = run_sync_loop(job, SyncLoopConfig(steps=20, apps=("filesystem", "sheets")))
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from envs.faults import FaultInjector, FaultKind, InjectedFault
from envs.harness.engine_client import EngineRejected
from envs.types import TaskSpec, Trajectory
from trainer.engine.weight_sync import push_weights
from trainer.local import EmptyBatchError, LocalTrainer, TrainBatch
from trainer.loops.async_loop import MAX_REQUEUES
from trainer.loops.config import LoopConfig
from trainer.loops.evaluation import evaluate_reward
from trainer.loops.generation import GenerationClient, open_generation
from trainer.loops.history import LoopHistory, StepRecord, WallClock
from trainer.loops.job import LoopJob
from trainer.loops.policy import engine_weights, open_trainer
from trainer.loops.rollouts import Rollouts, generated_tokens, outcome, trainable

log = logging.getLogger(__name__)


class SyncLoopConfig(LoopConfig):
    """The synchronous loop: B = ``prompts_per_step`` groups generated, then trained on, every step."""


def run_sync_loop(job: LoopJob, config: SyncLoopConfig) -> LoopHistory:
    """Run (or resume from ``job.out_dir``'s newest checkpoint) the loop up to ``config.steps``; see the module
    docstring. ``job.hooks.on_rollouts`` sees each step's rollouts."""
    return asyncio.run(sync_loop(job, config))


async def sync_loop(job: LoopJob, config: SyncLoopConfig) -> LoopHistory:
    """``run_sync_loop`` for callers already inside an event loop."""
    selected = config.tasks.select(job.tasks)
    trainer, tokenizer, resumed = open_trainer(job.policy_dir, config.trainer, job.out_dir)
    async with open_generation(engine_weights(job.policy_dir, resumed), config) as generation:
        faults = config.faults
        client = generation.client
        rollouts = config.rollouts(job.envs(config.apps), client, generation.tokenizer)
        generator = _Generator(
            rollouts, selected, config.samples_per_prompt, faults.injector("worker") if faults else None
        )
        checkpoints = config.checkpoints(job.out_dir, "sync")
        step = resumed.step if resumed else 0
        cursor = int(resumed.data_cursor) if resumed else 0  # type: ignore[arg-type]
        history = LoopHistory.resume(job.out_dir, "sync", step)
        clock = WallClock(history.wall_s)  # wall time continues across resumes
        while step < config.steps:
            step += 1
            positions = list(range(cursor, cursor + config.prompts_per_step))
            cursor += config.prompts_per_step
            record, everyone, flat = await generator.step(step, positions)
            job.hooks.rollouts(step, everyone)
            config.crash_if_due(step)
            await _train(trainer, client, flat, record, config)
            record.wall_s = clock.now()
            if config.eval_due(step):
                with clock.stopped():  # evaluation is not loop time
                    evaluated = await evaluate_reward(rollouts, selected[: config.eval_tasks], config.eval_samples)
                record.eval_reward, record.eval_pass_rate = evaluated
            history.steps.append(record)
            # The record before the checkpoint: a kill between the two resumes from the previous checkpoint (the
            # history is cut back to it); the other order would resume from this one without this step's record.
            history.save(job.out_dir)
            if config.checkpoint_due(step):
                checkpoints.save(trainer, tokenizer, step, cursor)
            job.hooks.step(record)
        return history


@dataclass(frozen=True)
class _Generator:
    """Steps 1-2: the run's rollouts over its selected tasks, n samples a group, under injected generation crashes."""

    rollouts: Rollouts
    tasks: Sequence[TaskSpec]
    n: int
    crashes: FaultInjector | None

    async def step(self, step: int, positions: list[int]) -> tuple[StepRecord, list[Trajectory], list[Trajectory]]:
        """The groups at ``positions``, all at once: the step's record as if nothing were trained, every rollout
        (to record) and the trainable ones (to train on)."""
        tick = time.perf_counter()
        groups = await asyncio.gather(*(self.group(p) for p in positions))
        generate_s = time.perf_counter() - tick
        everyone = [t for group in groups for t in group]
        flat = trainable(everyone)
        if not flat:
            raise RuntimeError(f"step {step}: every rollout failed for infra or task reasons")
        reward_mean, pass_rate = outcome(flat)
        record = StepRecord(
            step=step,
            wall_s=0.0,
            reward_mean=reward_mean,
            pass_rate=pass_rate,
            trajectories=len(flat),
            groups_dropped=len(positions),
            trained=False,
            generate_s=generate_s,
            tokens_per_s=generated_tokens(flat) / generate_s,
            positions=positions,
        )
        return record, everyone, flat

    async def group(self, position: int) -> list[Trajectory]:
        """Every rollout of the group at ``position``; a generation that dies (an injected ``worker_crash``, any
        error but the engine's refusal) is started again, at most ``MAX_REQUEUES`` times, then its error is raised."""
        task = self.rollouts.task_at(self.tasks, position)
        deaths = 0
        while True:
            try:
                if self.crashes is not None and self.crashes.fires(FaultKind.WORKER_CRASH):
                    raise InjectedFault(f"injected fault: the generation of position {position} crashed")
                return await self.rollouts.run(task, position, self.n)
            except EngineRejected:
                raise
            except Exception as error:
                deaths += 1
                if deaths > MAX_REQUEUES:
                    raise
                log.warning(
                    "generating position %d died (%s: %s); starting it again", position, type(error).__name__, error
                )
                if self.rollouts.faults is not None:
                    self.rollouts.faults.note_retry("worker_crash", "worker")


async def _train(
    trainer: LocalTrainer, client: GenerationClient, flat: list[Trajectory], record: StepRecord, config: LoopConfig
) -> None:
    """Steps 3-5 onto ``record``: one optimizer step on the groups with signal and the weight push (none when every
    group ties)."""
    try:
        batch = TrainBatch.from_trajectories(flat, config.trainer.algorithm)
    except EmptyBatchError:
        return
    metrics = trainer.train_step(batch)
    tick = time.perf_counter()
    await push_weights(client, trainer)
    record.sync_s = time.perf_counter() - tick
    record.train_s = metrics.step_s
    record.trained = True
    record.groups_dropped = batch.stats.groups_dropped + len(record.positions) - batch.stats.groups_in
    record.loss = metrics.loss
    record.logprob_abs_diff_mean = metrics.logprob_abs_diff_mean
    record.activity = metrics.activity
    record.retention_nll = metrics.retention_nll
