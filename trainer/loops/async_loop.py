"""The fully-async RL loop (RECIPE "Fully-async RL"): generation never waits for training, within a staleness bound.

K generation workers (asyncio tasks) each produce one group at a time and put it into a bounded buffer; the trainer
pulls B groups, steps, and syncs the weights *in flight* (``push_weights``: pause(keep) → update → resume — running
requests freeze with their KV cache and continue on the new weights). Rules:

* admission (``admission_capacity``): a worker may start a new group only while
  min(K − running, (S + step)·B − (accepted + running)) > 0, with ``step`` the 1-based index of the step the
  trainer works towards, ``accepted`` the groups that entered the buffer since the run began (counted from
  ``(steps done at start)·B`` on a resume) and ``running`` the groups being generated. Hence a group is trained at
  most S steps after the weights that began it: staleness = (steps done when it is trained) − (weights version
  when it was generated) ≤ S; S = 0 degenerates to the synchronous loop.
* a group whose rewards tie (zero variance, ``common.has_signal``) is dropped and its slot is refilled (dropped
  groups are not ``accepted``, so admission opens again).
* the admission rule bounds how far generation runs ahead, but a slow group can still be overtaken by younger
  ones; the trainer drops (and frees the slot of) any group that would exceed S when it reaches the front, so the
  bound holds per trajectory, not only on average (``groups_stale`` counts them).
* staleness is measured per trajectory from the engine's weight versions (the oldest version that produced a turn;
  the harness records the version at each turn's end, so this is a lower bound on the true staleness).
* ``wait_s``: the trainer's idle seconds waiting for the buffer (wait_for_generation_buffer); idle share = Σ wait /
  wall. Tokens/s counts generated (loss-masked) tokens over each step's wall time.
* resume: a checkpoint stores ``{"next": next stream position, "pending": positions started but not trained or
  dropped}``; a resumed run re-generates the pending positions first, so no task of the stream is skipped.

Runtime: ``InProcessRuntime`` (engine + trainer here, training in a worker thread) or ``trainer.loops.ray_runtime``
(engine and trainer as Ray actors); the loop only sees the ``Runtime`` protocol.

    history = run_async_loop(policy_dir, tasks, worlds_root, AsyncLoopConfig(workers=8, max_staleness=1), out_dir)
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from pydantic import Field, JsonValue

from envs.types import TaskSpec, Trajectory
from trainer.local import StepMetrics, TrainBatch, save_checkpoint
from trainer.loops.common import (
    CHECKPOINTS,
    EnvsFor,
    LoopConfig,
    LoopHistory,
    OnRollouts,
    OnStep,
    Policy,
    StepRecord,
    default_envs,
    evaluate_reward,
    generated_tokens,
    has_signal,
    open_policy,
    rollout_group,
    task_at,
)
from trainer.loops.engine_adapter import InProcessEngine, push_weights


class RuntimeKind(StrEnum):
    ASYNCIO = "asyncio"
    RAY = "ray"


class AsyncLoopConfig(LoopConfig):
    """The fully-async loop: K workers, staleness bound S, mini-batches of B = ``prompts_per_step`` groups."""

    workers: int = Field(8, ge=1)
    """K generation workers, each producing one group at a time."""
    max_staleness: int = Field(1, ge=0)
    """S: the most optimizer steps between the weights that generated a group and the step that trains on it."""
    runtime: RuntimeKind = RuntimeKind.ASYNCIO
    ray_address: str | None = None
    """Ray cluster address (None: a local ``ray.init(num_cpus=2)``)."""


def admission_capacity(workers: int, running: int, max_staleness: int, step: int, batch: int, accepted: int) -> int:
    """How many more groups may start now: min(K − running, (S + step)·B − (accepted + running)) (RECIPE)."""
    return min(workers - running, (max_staleness + step) * batch - (accepted + running))


@dataclass
class StreamCursor:
    """Positions of the task stream still owed: ``pending`` ones first (re-runs after a resume), then ``next`` on."""

    next: int = 0
    pending: deque[int] = field(default_factory=deque)

    def take(self) -> int:
        if self.pending:
            return self.pending.popleft()
        self.next += 1
        return self.next - 1

    def to_json(self, outstanding: set[int]) -> dict[str, JsonValue]:
        """Checkpoint form: positions started (or queued for re-run) but not yet trained on or dropped."""
        return {"next": self.next, "pending": sorted(outstanding | set(self.pending))}

    @classmethod
    def from_json(cls, saved: JsonValue) -> StreamCursor:
        if not isinstance(saved, dict) or not isinstance(saved.get("next"), int):
            raise ValueError(f"not an async-loop cursor (want {{'next': int, 'pending': [int]}}): {saved!r}")
        return cls(saved["next"], deque(int(p) for p in saved.get("pending") or []))  # type: ignore[union-attr]


def staleness(trainer_steps_done: int, trajectory: Trajectory, version_offset: int) -> int:
    """Steps done by the trainer minus the weights version (offset by the steps done at start) that generated it."""
    if not trajectory.weight_versions:
        return 0
    return trainer_steps_done - (version_offset + min(trajectory.weight_versions))


class Runtime(Protocol):
    """Where groups are generated and steps trained; ``version_offset`` maps engine versions to trainer steps."""

    version_offset: int

    async def generate(self, position: int) -> list[Trajectory]: ...

    async def train(self, trajectories: list[Trajectory]) -> StepMetrics: ...

    async def push(self) -> int: ...

    async def evaluate(self) -> tuple[float, float]: ...

    async def checkpoint(self, step: int, cursor: dict[str, JsonValue]) -> None: ...


class InProcessRuntime:
    """Engine and trainer in this process: generation on the engine's thread, ``train_step`` in a worker thread."""

    def __init__(
        self, policy: Policy, tasks: Sequence[TaskSpec], envs_for: EnvsFor, config: AsyncLoopConfig, out_dir: Path
    ) -> None:
        self.policy, self.tasks, self.envs_for, self.config, self.out_dir = policy, tasks, envs_for, config, out_dir
        self.client = InProcessEngine(policy.engine)
        self.version_offset = policy.resumed.step if policy.resumed else 0

    async def generate(self, position: int) -> list[Trajectory]:
        task = self.tasks[task_at(position, len(self.tasks), self.config.seed)]
        return await rollout_group(
            task,
            position,
            self.envs_for,
            self.client,
            self.policy.tokenizer,
            self.config.harness,
            seed=self.config.seed,
            n=self.config.samples_per_prompt,
        )

    async def train(self, trajectories: list[Trajectory]) -> StepMetrics:
        batch = TrainBatch.from_trajectories(trajectories, self.config.trainer.algorithm)
        return await asyncio.to_thread(self.policy.trainer.train_step, batch)

    async def push(self) -> int:
        return await push_weights(self.client, self.policy.trainer)

    async def evaluate(self) -> tuple[float, float]:
        config = self.config
        return await evaluate_reward(
            self.tasks[: config.eval_tasks],
            self.envs_for,
            self.client,
            self.policy.tokenizer,
            config.harness,
            n=config.eval_samples,
            seed=config.seed,
        )

    async def checkpoint(self, step: int, cursor: dict[str, JsonValue]) -> None:
        trainer, tokenizer = self.policy.trainer, self.policy.tokenizer
        root = self.out_dir / CHECKPOINTS
        harness = self.config.policy_harness()
        await asyncio.to_thread(
            save_checkpoint, root, trainer, step, cursor, {"kind": "async"}, tokenizer=tokenizer, harness=harness
        )


@dataclass
class _Counters:
    steps_done: int
    accepted: int
    running: int = 0
    dropped: int = 0
    finished: list[Trajectory] = field(default_factory=list)  # every finished group's rollouts since the last step


async def run_async(
    runtime: Runtime,
    config: AsyncLoopConfig,
    start_step: int,
    cursor: StreamCursor,
    history: LoopHistory,
    out_dir: Path,
    on_step: OnStep | None = None,
    on_rollouts: OnRollouts | None = None,
) -> LoopHistory:
    """The worker / trainer choreography of the module docstring over any ``Runtime``."""
    K, S, B = config.workers, config.max_staleness, config.prompts_per_step
    counters = _Counters(steps_done=start_step, accepted=start_step * B)
    buffer: asyncio.Queue[tuple[int, list[Trajectory]]] = asyncio.Queue(maxsize=(S + 1) * B)
    changed = asyncio.Condition()
    outstanding: set[int] = set()

    def capacity() -> int:
        return admission_capacity(K, counters.running, S, counters.steps_done + 1, B, counters.accepted)

    async def worker() -> None:
        while True:
            async with changed:
                await changed.wait_for(lambda: capacity() > 0)
                position = cursor.take()
                outstanding.add(position)
                counters.running += 1
            group = await runtime.generate(position)
            async with changed:
                counters.running -= 1
                counters.finished.extend(group)
                if has_signal(group, config.trainer.algorithm):
                    counters.accepted += 1
                    buffer.put_nowait((position, group))
                else:
                    counters.dropped += 1
                    outstanding.discard(position)
                changed.notify_all()

    clock_origin = time.perf_counter() - history.wall_s
    async with asyncio.TaskGroup() as tasks:
        workers = [tasks.create_task(worker()) for _ in range(K)]
        last_wall = history.wall_s
        while counters.steps_done < config.steps:
            tick = time.perf_counter()
            items: list[tuple[int, list[Trajectory]]] = []
            stale = 0
            while len(items) < B:
                position, group = await buffer.get()
                if max(staleness(counters.steps_done, t, runtime.version_offset) for t in group) <= S:
                    items.append((position, group))
                    continue
                async with changed:  # overtaken by younger groups past the bound: drop it, free its slot
                    stale += 1
                    counters.accepted -= 1
                    outstanding.discard(position)
                    changed.notify_all()
            wait_s = time.perf_counter() - tick
            trajectories = [t for _, group in items for t in group]
            staleness_B = [staleness(counters.steps_done, t, runtime.version_offset) for t in trajectories]
            metrics = await runtime.train(trajectories)
            tick = time.perf_counter()
            await runtime.push()
            sync_s = time.perf_counter() - tick
            async with changed:
                counters.steps_done += 1
                outstanding.difference_update(p for p, _ in items)
                finished, counters.finished = counters.finished, []
                dropped, counters.dropped = counters.dropped, 0
                changed.notify_all()
            wall_s = time.perf_counter() - clock_origin
            # A step can train on groups that all finished before the previous step ended: nothing finished since.
            measured = finished or trajectories
            record = StepRecord(
                step=counters.steps_done,
                wall_s=wall_s,
                reward_mean=sum(t.reward for t in measured) / len(measured),
                pass_rate=sum(t.passed for t in measured) / len(measured),
                trajectories=len(trajectories),
                groups_dropped=dropped,
                groups_stale=stale,
                trained=True,
                train_s=metrics.step_s,
                sync_s=sync_s,
                wait_s=wait_s,
                staleness_mean=sum(staleness_B) / len(staleness_B),
                staleness_max=max(staleness_B),
                tokens_per_s=generated_tokens(finished) / max(wall_s - last_wall, 1e-9),
                loss=metrics.loss,
                logprob_abs_diff_mean=metrics.logprob_abs_diff_mean,
                positions=[p for p, _ in items],
            )
            last_wall = wall_s
            if config.eval_due(counters.steps_done):
                tick = time.perf_counter()
                record.eval_reward, record.eval_pass_rate = await runtime.evaluate()
                clock_origin += time.perf_counter() - tick
            history.steps.append(record)
            if on_rollouts is not None:
                on_rollouts(counters.steps_done, finished)
            if config.checkpoint_due(counters.steps_done):
                await runtime.checkpoint(counters.steps_done, cursor.to_json(outstanding))
            history.save(out_dir)
            if on_step is not None:
                on_step(record)
        for task in workers:
            task.cancel()
    return history


def run_async_loop(
    policy_dir: Path,
    tasks: Sequence[TaskSpec],
    worlds_root: Path,
    config: AsyncLoopConfig,
    out_dir: Path,
    on_step: OnStep | None = None,
    *,
    envs_for: EnvsFor | None = None,
    on_rollouts: OnRollouts | None = None,
) -> LoopHistory:
    """Run (or resume from ``out_dir``'s newest checkpoint) the fully-async loop on the configured runtime;
    ``on_rollouts`` sees, after each step, every rollout that finished since the previous one."""
    selected = config.tasks.select(tasks)
    if config.runtime is RuntimeKind.RAY:
        from trainer.loops.ray_runtime import run_on_ray  # ray is imported only when asked for

        return run_on_ray(policy_dir, selected, worlds_root, config, out_dir, on_step, envs_for, on_rollouts)
    policy = open_policy(policy_dir, config.trainer, out_dir, config.engine_config())
    try:
        envs_for = envs_for or default_envs(worlds_root, config.apps)
        runtime = InProcessRuntime(policy, selected, envs_for, config, out_dir)
        start = policy.resumed.step if policy.resumed else 0
        cursor = StreamCursor.from_json(policy.resumed.data_cursor) if policy.resumed else StreamCursor()
        history = LoopHistory.resume(out_dir, "async", start)
        return asyncio.run(run_async(runtime, config, start, cursor, history, out_dir, on_step, on_rollouts))
    finally:
        policy.close()
