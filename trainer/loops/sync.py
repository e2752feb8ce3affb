"""The synchronous RL loop: generate a batch with the current weights, train one step on it, push the weights.

One step:

1. positions cursor … cursor + B − 1 of the seeded task stream (``stream.task_at``) pick B tasks;
2. ``run_group`` per task, all B groups at once, n samples each, against the in-process engine;
3. ``TrainBatch.from_trajectories`` (zero-variance groups dropped; a step whose groups all tie trains nothing);
4. ``LocalTrainer.train_step`` — one AdamW step on the whole batch;
5. ``push_weights`` — the engine gets the new weights (pause(keep) → update → resume; nothing is in flight here);
6. a ``StepRecord`` (reward mean and pass rate of the step's rollouts; generate / train / sync seconds), an optional
   evaluation, and every ``checkpoint_every`` steps a checkpoint that stores the cursor — a rerun with the same
   ``out_dir`` resumes from the newest one and replays the exact task stream.

    job = LoopJob(Path("models/base/<hash>"), load_tasks(Path("data")), Path("data/worlds"), Path("runs/sync"))
    history = run_sync_loop(job, SyncLoopConfig(steps=20, apps=("filesystem", "sheets")))
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from envs.types import TaskSpec, Trajectory
from trainer.local import EmptyBatchError, TrainBatch
from trainer.loops.config import LoopConfig
from trainer.loops.engine_adapter import InProcessEngine, push_weights
from trainer.loops.evaluation import evaluate_reward
from trainer.loops.history import LoopHistory, StepRecord, WallClock
from trainer.loops.job import LoopJob
from trainer.loops.policy import Policy, open_policy
from trainer.loops.rollouts import Rollouts, generated_tokens, outcome


class SyncLoopConfig(LoopConfig):
    """The synchronous loop: B = ``prompts_per_step`` groups generated, then trained on, every step."""


def run_sync_loop(job: LoopJob, config: SyncLoopConfig) -> LoopHistory:
    """Run (or resume from ``job.out_dir``'s newest checkpoint) the loop up to ``config.steps``; see the module
    docstring. ``job.hooks.on_rollouts`` sees each step's rollouts."""
    return asyncio.run(sync_loop(job, config))


async def sync_loop(job: LoopJob, config: SyncLoopConfig) -> LoopHistory:
    """``run_sync_loop`` for callers already inside an event loop."""
    selected = config.tasks.select(job.tasks)
    policy = open_policy(job.policy_dir, config.trainer, job.out_dir, config.engine_config())
    try:
        client = InProcessEngine(policy.engine)
        rollouts = config.rollouts(job.envs(config.apps), client, policy.tokenizer)
        checkpoints = config.checkpoints(job.out_dir, "sync")
        step = policy.resumed.step if policy.resumed else 0
        cursor = int(policy.resumed.data_cursor) if policy.resumed else 0  # type: ignore[arg-type]
        history = LoopHistory.resume(job.out_dir, "sync", step)
        clock = WallClock(history.wall_s)  # wall time continues across resumes
        while step < config.steps:
            step += 1
            positions = list(range(cursor, cursor + config.prompts_per_step))
            cursor += config.prompts_per_step
            record, flat = await _generate(rollouts, selected, step, positions, config.samples_per_prompt)
            job.hooks.rollouts(step, flat)
            await _train(policy, client, flat, record, config)
            record.wall_s = clock.now()
            if config.eval_due(step):
                with clock.stopped():  # evaluation is not loop time
                    evaluated = await evaluate_reward(rollouts, selected[: config.eval_tasks], config.eval_samples)
                record.eval_reward, record.eval_pass_rate = evaluated
            history.steps.append(record)
            if config.checkpoint_due(step):
                checkpoints.save(policy.trainer, policy.tokenizer, step, cursor)
            history.save(job.out_dir)
            job.hooks.step(record)
        return history
    finally:
        policy.close()


async def _generate(
    rollouts: Rollouts, tasks: Sequence[TaskSpec], step: int, positions: list[int], n: int
) -> tuple[StepRecord, list[Trajectory]]:
    """Steps 1-2: the groups at ``positions``, all at once; the step's record as if nothing were trained."""
    tick = time.perf_counter()
    groups = await asyncio.gather(*(rollouts.at(tasks, p, n) for p in positions))
    generate_s = time.perf_counter() - tick
    flat = [t for group in groups for t in group]
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
    return record, flat


async def _train(
    policy: Policy, client: InProcessEngine, flat: list[Trajectory], record: StepRecord, config: LoopConfig
) -> None:
    """Steps 3-5 onto ``record``: one optimizer step on the groups with signal and the weight push (none when every
    group ties)."""
    try:
        batch = TrainBatch.from_trajectories(flat, config.trainer.algorithm)
    except EmptyBatchError:
        return
    metrics = policy.trainer.train_step(batch)
    tick = time.perf_counter()
    await push_weights(client, policy.trainer)
    record.sync_s = time.perf_counter() - tick
    record.train_s = metrics.step_s
    record.trained = True
    record.groups_dropped = batch.stats.groups_dropped + len(record.positions) - batch.stats.groups_in
    record.loss = metrics.loss
    record.logprob_abs_diff_mean = metrics.logprob_abs_diff_mean
