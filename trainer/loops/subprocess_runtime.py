"""The fully-async loop with the trainer in a child process: the engine, the harness, the tool sessions and the loop
stay here, the ``TrainerService`` runs in a spawned child, so generation and training never wait on one interpreter
lock. On two cores with the tiny model, threads in one process made each phase slower while the other ran (generation
1.5x, training 1.2x); a child process keeps them apart (numbers: benchmarks/learning_curve.py, docs/benchmarks.md).

Calls go over a pipe, one at a time: trajectories in, ``StepMetrics`` out; the weights for a push come back as one
safetensors blob (a copy, like ``LocalTrainer.state_dict_for_engine``); checkpoints are written by the child. Every call
waits at most ``call_timeout_s`` and notices within a second when the child died; a failure in the child is raised
here as ``TrainerProcessError`` carrying the child's traceback. The child exits when asked, when the pipe closes (the
parent died) or is killed after ``CLOSE_TIMEOUT_S``.

    history = run_async_loop(job, AsyncLoopConfig(runtime="subprocess"))
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
from pydantic import JsonValue
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import Tensor

from envs.types import Trajectory
from trainer.local import CheckpointInfo, StepMetrics
from trainer.loops.async_loop import AsyncLoopConfig
from trainer.loops.history import LoopHistory
from trainer.loops.in_process import run_with_trainer
from trainer.loops.job import LoopJob
from trainer.loops.trainer_service import TrainerService

START_TIMEOUT_S = 300.0  # spawning imports torch and transformers, then loads the policy: seconds, minutes when busy
CALL_TIMEOUT_S = 3600.0
CLOSE_TIMEOUT_S = 10.0
_OPS = frozenset({"train", "state_dict_for_engine", "checkpoint"})


class TrainerProcessError(RuntimeError):
    """The trainer's child process failed a call, died, or did not answer in time."""


def _serve(conn: Connection, policy_dir: Path, out_dir: Path, config: AsyncLoopConfig, torch_threads: int) -> None:
    """The child: open the ``TrainerService`` (its ``resumed`` checkpoint is the first answer), then serve calls."""
    torch.set_num_threads(torch_threads)
    try:
        service = TrainerService(policy_dir, out_dir, config)
    except Exception:
        conn.send((False, traceback.format_exc()))
        return
    conn.send((True, service.resumed))
    while True:
        try:
            op, args = conn.recv()
        except EOFError:  # the parent is gone
            return
        if op not in _OPS:
            return
        try:
            value = getattr(service, op)(*args)
            conn.send((True, save_tensors(value) if op == "state_dict_for_engine" else value))
        except Exception:
            conn.send((False, traceback.format_exc()))


class TrainerProcess:
    """A ``TrainerHandle`` (``in_process``) over a ``TrainerService`` in a spawned child process."""

    def __init__(
        self,
        policy_dir: Path,
        out_dir: Path,
        config: AsyncLoopConfig,
        *,
        call_timeout_s: float = CALL_TIMEOUT_S,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        # spawn, not fork: this process already runs threads (engine, event loop), which a fork would copy mid-state
        context = multiprocessing.get_context("spawn")
        self._conn, child_end = context.Pipe()
        self._process = context.Process(
            target=_serve,
            args=(child_end, policy_dir, out_dir, config, torch.get_num_threads()),
            name="rl-recipe-trainer",
            daemon=True,
        )
        self._process.start()
        child_end.close()
        self._lock = threading.Lock()
        self._call_timeout_s = call_timeout_s
        try:
            self.resumed: CheckpointInfo | None = self._answer("start", start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _answer(self, op: str, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while not self._conn.poll(min(1.0, max(0.0, deadline - time.monotonic()))):
            if not self._process.is_alive():
                raise TrainerProcessError(f"the trainer process exited (code {self._process.exitcode}) during {op}")
            if time.monotonic() >= deadline:
                raise TrainerProcessError(f"the trainer process did not answer {op} within {timeout_s:.0f} s")
        try:
            ok, value = self._conn.recv()
        except (EOFError, OSError):  # the child closed its end or died mid-answer
            self._process.join(CLOSE_TIMEOUT_S)
            raise TrainerProcessError(
                f"the trainer process exited (code {self._process.exitcode}) during {op}"
            ) from None
        if not ok:
            raise TrainerProcessError(f"{op} failed in the trainer process:\n{value}")
        return value

    def _call(self, op: str, *args: Any) -> Any:
        with self._lock:
            try:
                self._conn.send((op, args))
            except (BrokenPipeError, OSError) as error:
                raise TrainerProcessError(f"the trainer process is gone ({error}); cannot {op}") from None
            return self._answer(op, self._call_timeout_s)

    def train(self, trajectories: list[Trajectory]) -> StepMetrics:
        return self._call("train", trajectories)

    def state_dict_for_engine(self) -> dict[str, Tensor]:
        return load_tensors(self._call("state_dict_for_engine"))

    def checkpoint(self, step: int, cursor: dict[str, JsonValue]) -> None:
        self._call("checkpoint", step, cursor)

    def close(self) -> None:
        """Ask the child to exit; kill it if it does not within ``CLOSE_TIMEOUT_S``."""
        if self._process.is_alive():
            with contextlib.suppress(OSError):
                self._conn.send(("close", ()))
            self._process.join(CLOSE_TIMEOUT_S)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(CLOSE_TIMEOUT_S)
        self._conn.close()


def run_in_subprocess(job: LoopJob, config: AsyncLoopConfig) -> LoopHistory:
    """Run (or resume from ``job.out_dir``'s newest checkpoint) the fully-async loop with the trainer in a child
    process and everything else here."""
    trainer = TrainerProcess(job.policy_dir, job.out_dir, config)
    try:
        return run_with_trainer(job, config, trainer, trainer.resumed)
    finally:
        trainer.close()
