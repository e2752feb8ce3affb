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
* a group whose rewards tie (zero variance, ``rollouts.has_signal``) is dropped and its slot is refilled (dropped
  groups are not ``accepted``, so admission opens again); ``max_dropped_in_a_row`` such groups with none accepted
  end the run with ``NoRewardSignal`` (a policy that solves none or all of its tasks would otherwise sample forever:
  a hero on tasks its base never solved drew 2,696 rollouts in 17 minutes for one step).
* the admission rule bounds how far generation runs ahead, but a slow group can still be overtaken by younger
  ones; the trainer drops (and frees the slot of) any group that would exceed S when it reaches the front, so the
  bound holds per trajectory, not only on average (``groups_stale`` counts them).
* staleness is measured per trajectory from the engine's weight versions (the oldest version that produced a turn;
  the harness records the version at each turn's end, so this is a lower bound on the true staleness).
* ``wait_s``: the trainer's idle seconds waiting for the buffer (wait_for_generation_buffer); idle share = Σ wait /
  wall. Tokens/s counts generated (loss-masked) tokens over each step's wall time.
* a worker whose group raised (an injected ``worker_crash``, any bug in generation; ``EngineRejected``, a
  configuration error, still ends the run) dies: its position goes back to the front of the stream (``pending``)
  and a new worker takes its place, so the buffer never waits on a dead worker; a position that kills
  ``MAX_REQUEUES`` workers in a row ends the run with that error instead of looping.
* rollouts an infra fault or a broken task ended (``error_class`` retryable_infra / task) are reported to the hooks
  with the rest but never trained on (``rollouts.trainable``); the rollouts that finished after the last step are
  reported at the end, so every finished rollout is recorded.
* resume: a checkpoint stores ``{"next": next stream position, "pending": positions started but not trained or
  dropped}``; a resumed run re-generates the pending positions first, so no task of the stream is skipped.

Runtime: the loop (``run_async``) only sees the ``Runtime`` protocol; ``trainer.loops.in_process`` (engine here, the
trainer in a worker thread or, through ``subprocess_runtime``, in a child process) and ``trainer.loops.ray_runtime``
(engine and trainer as Ray actors) implement it, and ``trainer.loops.runtimes.run_async_loop`` picks one by
``AsyncLoopConfig.runtime``.

    history = run_async_loop(LoopJob(policy_dir, tasks, worlds_root, out_dir), AsyncLoopConfig(workers=8))
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import Field, JsonValue

from envs.faults import FaultInjector, FaultKind, InjectedFault
from envs.harness.engine_client import EngineRejected
from envs.types import Trajectory
from trainer.local import CheckpointInfo, StepMetrics
from trainer.loops.config import LoopConfig
from trainer.loops.history import LoopHistory, StepRecord, WallClock
from trainer.loops.job import LoopHooks
from trainer.loops.kinds import RuntimeKind
from trainer.loops.rollouts import generated_tokens, has_signal, outcome, trainable

log = logging.getLogger(__name__)

MAX_REQUEUES = 3
"""Workers one stream position may kill before the run stops with its error."""


class AsyncLoopConfig(LoopConfig):
    """The fully-async loop: K workers, staleness bound S, mini-batches of B = ``prompts_per_step`` groups."""

    workers: int = Field(8, ge=1)
    """K generation workers, each producing one group at a time."""
    max_staleness: int = Field(1, ge=0)
    """S: the most optimizer steps between the weights that generated a group and the step that trains on it."""
    runtime: RuntimeKind = RuntimeKind.ASYNCIO
    ray_address: str | None = None
    """Ray cluster address (None: a local ``ray.init(num_cpus=2)``)."""
    max_dropped_in_a_row: int = Field(256, ge=1)
    """Groups in a row without reward variance after which the run ends (``NoRewardSignal``)."""


class NoRewardSignal(RuntimeError):
    """Every group for ``max_dropped_in_a_row`` in a row had rewards that all tie, or no rollout to train on."""


def no_signal_message(groups: int, last: list[Trajectory], kept: list[Trajectory]) -> str:
    """Why ``groups`` groups in a row were dropped, from the last one: the policy (its rewards tie) or the rollouts
    (none trainable: an engine or environment failing, named by the first error)."""
    if kept:
        return (
            f"{groups} groups in a row had rewards that all tie (the last: {sorted({t.reward for t in kept})}), so "
            "there is nothing to learn from: the policy solves none (or all) of these tasks. Train on tasks with "
            "reward variance (de-risk counts them) or a stronger base"
        )
    failed = next((t for t in last if t.error), None)
    cause = f"{failed.error_class}: {failed.error}" if failed is not None else "no rollout finished"
    return (
        f"{groups} groups in a row had no rollout to train on (the last group's first failure: {cause}): the "
        "engines or the environment fail, not the policy"
    )


def admission_capacity(config: AsyncLoopConfig, running: int, step: int, accepted: int) -> int:
    """How many more groups may start now: min(K − running, (S + step)·B − (accepted + running)) (RECIPE)."""
    K, S, B = config.workers, config.max_staleness, config.prompts_per_step
    return min(K - running, (S + step) * B - (accepted + running))


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


@dataclass
class AsyncStart:
    """Where a run (re)starts: the optimizer steps done, the stream cursor, and the history so far."""

    step: int
    cursor: StreamCursor
    history: LoopHistory

    @classmethod
    def resume(cls, resumed: CheckpointInfo | None, out_dir: Path) -> AsyncStart:
        """From the checkpoint a runtime resumed (None: a fresh run) and ``out_dir``'s saved history."""
        step = resumed.step if resumed else 0
        cursor = StreamCursor.from_json(resumed.data_cursor) if resumed else StreamCursor()
        return cls(step, cursor, LoopHistory.resume(out_dir, "async", step))


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


@dataclass
class _Batch:
    """B groups for one step, as (stream position, group), and what gathering them cost."""

    items: list[tuple[int, list[Trajectory]]]
    stale: int
    wait_s: float

    @property
    def positions(self) -> list[int]:
        return [p for p, _ in self.items]

    @property
    def trajectories(self) -> list[Trajectory]:
        return [t for _, group in self.items for t in group]


class _WorkerDied(Exception):
    """A generation worker's group raised; its position was re-queued and the worker is to be replaced."""


class _Choreography:
    """The state the workers and the trainer share (changed only under ``changed``), and their moves."""

    def __init__(self, runtime: Runtime, config: AsyncLoopConfig, start: AsyncStart) -> None:
        self.runtime, self.config, self.cursor = runtime, config, start.cursor
        S, B = config.max_staleness, config.prompts_per_step
        self.steps_done, self.accepted, self.running, self.dropped = start.step, start.step * B, 0, 0
        self.dropped_in_a_row = 0
        self.finished: list[Trajectory] = []  # every finished group's rollouts since the last step
        self.outstanding: set[int] = set()
        self.buffer: asyncio.Queue[tuple[int, list[Trajectory]]] = asyncio.Queue(maxsize=(S + 1) * B)
        self.changed = asyncio.Condition()
        self.faults: FaultInjector | None = config.faults.injector("worker") if config.faults else None
        self.deaths: dict[int, int] = {}  # position -> workers it killed
        self.workers_replaced = 0

    def capacity(self) -> int:
        return admission_capacity(self.config, self.running, self.steps_done + 1, self.accepted)

    def staleness(self, trajectory: Trajectory) -> int:
        return staleness(self.steps_done, trajectory, self.runtime.version_offset)

    async def supervised_worker(self) -> None:
        """A ``worker``, replaced by a new one each time it dies (see the module docstring)."""
        while True:
            try:
                await self.worker()
            except _WorkerDied as died:
                self.workers_replaced += 1
                log.warning("generation worker died (%s); replacing it", died)

    async def worker(self) -> None:
        """Generate one group at a time while admission allows; buffer the ones with signal, drop the others."""
        while True:
            async with self.changed:
                await self.changed.wait_for(lambda: self.capacity() > 0)
                position = self.cursor.take()
                self.outstanding.add(position)
                self.running += 1
            try:
                if self.faults is not None and self.faults.fires(FaultKind.WORKER_CRASH):
                    raise InjectedFault(f"injected fault: the worker generating position {position} crashed")
                group = await self.runtime.generate(position)
            except EngineRejected:
                raise
            except Exception as error:
                await self._requeue(position, error)
                raise _WorkerDied(f"position {position}: {type(error).__name__}: {error}") from error
            async with self.changed:
                self.running -= 1
                self.finished.extend(group)  # recorded with their error class; trained on only if trainable
                kept = trainable(group)
                if has_signal(kept, self.config.trainer.algorithm):
                    self.accepted += 1
                    self.dropped_in_a_row = 0
                    self.buffer.put_nowait((position, kept))
                else:
                    self.dropped += 1
                    self.dropped_in_a_row += 1
                    self.outstanding.discard(position)
                self.changed.notify_all()
            if self.dropped_in_a_row >= self.config.max_dropped_in_a_row:
                raise NoRewardSignal(no_signal_message(self.dropped_in_a_row, group, kept))

    async def _requeue(self, position: int, error: Exception) -> None:
        """Give a dead worker's position back to the stream (first in line), unless it keeps killing workers."""
        self.deaths[position] = self.deaths.get(position, 0) + 1
        if self.deaths[position] > MAX_REQUEUES:
            raise RuntimeError(f"stream position {position} killed {MAX_REQUEUES + 1} workers in a row") from error
        if self.config.faults is not None:
            self.config.faults.note_retry("worker_crash", "worker")
        async with self.changed:
            self.running -= 1
            self.outstanding.discard(position)
            self.cursor.pending.appendleft(position)
            self.changed.notify_all()

    async def next_batch(self) -> _Batch:
        """The next B buffered groups within the staleness bound; older ones are dropped and their slots freed."""
        tick = time.perf_counter()
        items: list[tuple[int, list[Trajectory]]] = []
        stale = 0
        while len(items) < self.config.prompts_per_step:
            position, group = await self.buffer.get()
            if max(self.staleness(t) for t in group) <= self.config.max_staleness:
                items.append((position, group))
                continue
            async with self.changed:  # overtaken by younger groups past the bound: drop it, free its slot
                stale += 1
                self.accepted -= 1
                self.outstanding.discard(position)
                self.changed.notify_all()
        return _Batch(items, stale, time.perf_counter() - tick)

    async def train(self, batch: _Batch, clock: WallClock, last_wall: float) -> tuple[StepRecord, list[Trajectory]]:
        """One optimizer step on ``batch`` and the weight push; its record, and every rollout that finished since
        the previous step."""
        trajectories = batch.trajectories
        staleness_B = [self.staleness(t) for t in trajectories]
        metrics = await self.runtime.train(trajectories)
        tick = time.perf_counter()
        await self.runtime.push()
        sync_s = time.perf_counter() - tick
        async with self.changed:
            self.steps_done += 1
            self.outstanding.difference_update(batch.positions)
            finished, self.finished = self.finished, []
            dropped, self.dropped = self.dropped, 0
            self.changed.notify_all()
        wall_s = clock.now()
        # A step can train on groups that all finished before the previous step ended: nothing finished since.
        reward_mean, pass_rate = outcome(finished or trajectories)
        record = StepRecord(
            step=self.steps_done,
            wall_s=wall_s,
            reward_mean=reward_mean,
            pass_rate=pass_rate,
            trajectories=len(trajectories),
            groups_dropped=dropped,
            groups_stale=batch.stale,
            trained=True,
            train_s=metrics.step_s,
            sync_s=sync_s,
            wait_s=batch.wait_s,
            staleness_mean=sum(staleness_B) / len(staleness_B),
            staleness_max=max(staleness_B),
            tokens_per_s=generated_tokens(finished) / max(wall_s - last_wall, 1e-9),
            loss=metrics.loss,
            logprob_abs_diff_mean=metrics.logprob_abs_diff_mean,
            activity=metrics.activity,
            retention_nll=metrics.retention_nll,
            positions=batch.positions,
        )
        return record, finished


async def run_async(
    runtime: Runtime, config: AsyncLoopConfig, start: AsyncStart, out_dir: Path, hooks: LoopHooks | None = None
) -> LoopHistory:
    """The worker / trainer choreography of the module docstring over any ``Runtime``."""
    hooks = hooks or LoopHooks()
    history, clock = start.history, WallClock(start.history.wall_s)
    loop = _Choreography(runtime, config, start)
    ended: Exception | None = None
    try:
        await _choreograph(loop, runtime, config, history, clock, out_dir, hooks)
    except ExceptionGroup as group:  # a worker's run-ending error, raised as itself (its class is the finding)
        ending = [e for e in group.exceptions if isinstance(e, NoRewardSignal | EngineRejected)]
        if not ending:
            raise
        ended = ending[0]
    if loop.finished:  # finished after the last step or before the run ended: recorded too
        hooks.rollouts(loop.steps_done, loop.finished)
    if loop.workers_replaced:
        log.warning("%d generation workers died and were replaced", loop.workers_replaced)
    if ended is not None:
        raise ended from None
    return history


async def _choreograph(
    loop: _Choreography,
    runtime: Runtime,
    config: AsyncLoopConfig,
    history: LoopHistory,
    clock: WallClock,
    out_dir: Path,
    hooks: LoopHooks,
) -> None:
    """The workers and the trainer until ``config.steps`` steps are done (then the workers are cancelled)."""
    async with asyncio.TaskGroup() as tasks:
        workers = [tasks.create_task(loop.supervised_worker()) for _ in range(config.workers)]
        last_wall = history.wall_s
        while loop.steps_done < config.steps:
            batch = await loop.next_batch()
            config.crash_if_due(loop.steps_done + 1)
            record, finished = await loop.train(batch, clock, last_wall)
            last_wall = record.wall_s
            if config.eval_due(record.step):
                with clock.stopped():
                    record.eval_reward, record.eval_pass_rate = await runtime.evaluate()
            history.steps.append(record)
            hooks.rollouts(record.step, finished)
            # The step's record before its checkpoint: a kill between the two then resumes from the previous
            # checkpoint with a history the resume cuts back to it, never from a checkpoint whose record was lost.
            history.save(out_dir)
            if config.checkpoint_due(record.step):
                await runtime.checkpoint(record.step, loop.cursor.to_json(loop.outstanding))
            hooks.step(record)
        for task in workers:
            task.cancel()
