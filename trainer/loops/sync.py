"""The synchronous RL loop: generate a batch with the current weights, train one step on it, push the weights.

One step:

1. positions cursor … cursor + B − 1 of the seeded task stream (``common.task_at``) pick B tasks;
2. ``run_group`` per task, all B groups at once, n samples each, against the in-process engine;
3. ``TrainBatch.from_trajectories`` (zero-variance groups dropped; a step whose groups all tie trains nothing);
4. ``LocalTrainer.train_step`` — one AdamW step on the whole batch;
5. ``push_weights`` — the engine gets the new weights (pause(keep) → update → resume; nothing is in flight here);
6. a ``StepRecord`` (reward mean and pass rate of the step's rollouts; generate / train / sync seconds), an optional
   evaluation, and every ``checkpoint_every`` steps a checkpoint that stores the cursor — a rerun with the same
   ``out_dir`` resumes from the newest one and replays the exact task stream.

    history = run_sync_loop(Path("models/base/<hash>"), load_tasks(Path("data")), Path("data/worlds"),
                            SyncLoopConfig(steps=20, apps=("filesystem", "sheets")), Path("runs/sync"))
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from envs.types import TaskSpec
from trainer.local import EmptyBatchError, TrainBatch, save_checkpoint
from trainer.loops.common import (
    CHECKPOINTS,
    EnvsFor,
    LoopConfig,
    LoopHistory,
    OnRollouts,
    OnStep,
    StepRecord,
    default_envs,
    evaluate_reward,
    generated_tokens,
    open_policy,
    rollout_group,
    task_at,
)
from trainer.loops.engine_adapter import InProcessEngine, push_weights


class SyncLoopConfig(LoopConfig):
    """The synchronous loop: B = ``prompts_per_step`` groups generated, then trained on, every step."""


def run_sync_loop(
    policy_dir: Path,
    tasks: Sequence[TaskSpec],
    worlds_root: Path,
    config: SyncLoopConfig,
    out_dir: Path,
    on_step: OnStep | None = None,
    *,
    envs_for: EnvsFor | None = None,
    on_rollouts: OnRollouts | None = None,
) -> LoopHistory:
    """Run (or resume) the loop up to ``config.steps``; see the module docstring. ``envs_for`` overrides the
    environment factory per task (default: ``local_envs`` on a world copy under ``worlds_root``); ``on_rollouts``
    sees each step's rollouts."""
    return asyncio.run(
        sync_loop(policy_dir, tasks, worlds_root, config, out_dir, on_step, envs_for=envs_for, on_rollouts=on_rollouts)
    )


async def sync_loop(
    policy_dir: Path,
    tasks: Sequence[TaskSpec],
    worlds_root: Path,
    config: SyncLoopConfig,
    out_dir: Path,
    on_step: OnStep | None = None,
    *,
    envs_for: EnvsFor | None = None,
    on_rollouts: OnRollouts | None = None,
) -> LoopHistory:
    """``run_sync_loop`` for callers already inside an event loop."""
    selected = config.tasks.select(tasks)
    envs_for = envs_for or default_envs(worlds_root, config.apps)
    policy = open_policy(policy_dir, config.trainer, out_dir, config.engine_config())
    try:
        client = InProcessEngine(policy.engine)
        step = policy.resumed.step if policy.resumed else 0
        cursor = int(policy.resumed.data_cursor) if policy.resumed else 0  # type: ignore[arg-type]
        history = LoopHistory.resume(out_dir, "sync", step)
        clock_origin = time.perf_counter() - history.wall_s  # wall time continues across resumes
        B, n = config.prompts_per_step, config.samples_per_prompt
        while step < config.steps:
            step += 1
            positions = list(range(cursor, cursor + B))
            cursor += B
            tick = time.perf_counter()
            groups = await asyncio.gather(
                *(
                    rollout_group(
                        selected[task_at(p, len(selected), config.seed)],
                        p,
                        envs_for,
                        client,
                        policy.tokenizer,
                        config.harness,
                        seed=config.seed,
                        n=n,
                    )
                    for p in positions
                )
            )
            generate_s = time.perf_counter() - tick
            flat = [t for group in groups for t in group]
            if not flat:
                raise RuntimeError(f"step {step}: every rollout failed for infra or task reasons")
            if on_rollouts is not None:
                on_rollouts(step, flat)
            record = StepRecord(
                step=step,
                wall_s=0.0,
                reward_mean=sum(t.reward for t in flat) / len(flat),
                pass_rate=sum(t.passed for t in flat) / len(flat),
                trajectories=len(flat),
                groups_dropped=B,
                trained=False,
                generate_s=generate_s,
                tokens_per_s=generated_tokens(flat) / generate_s,
                positions=positions,
            )
            try:
                batch = TrainBatch.from_trajectories(flat, config.trainer.algorithm)
            except EmptyBatchError:
                batch = None
            if batch is not None:
                metrics = policy.trainer.train_step(batch)
                tick = time.perf_counter()
                await push_weights(client, policy.trainer)
                record.sync_s = time.perf_counter() - tick
                record.train_s = metrics.step_s
                record.trained = True
                record.groups_dropped = batch.stats.groups_dropped + B - batch.stats.groups_in
                record.loss = metrics.loss
                record.logprob_abs_diff_mean = metrics.logprob_abs_diff_mean
            record.wall_s = time.perf_counter() - clock_origin
            if config.eval_due(step):
                tick = time.perf_counter()
                record.eval_reward, record.eval_pass_rate = await evaluate_reward(
                    selected[: config.eval_tasks],
                    envs_for,
                    client,
                    policy.tokenizer,
                    config.harness,
                    n=config.eval_samples,
                    seed=config.seed,
                )
                clock_origin += time.perf_counter() - tick  # evaluation is not loop time
            history.steps.append(record)
            if config.checkpoint_due(step):
                save_checkpoint(
                    out_dir / CHECKPOINTS,
                    policy.trainer,
                    step,
                    cursor,
                    {"kind": "sync"},
                    tokenizer=policy.tokenizer,
                    harness=config.policy_harness(),
                )
            history.save(out_dir)
            if on_step is not None:
                on_step(record)
        return history
    finally:
        policy.close()
