"""RL loops over the local trainer and engine: synchronous (``sync``) and fully-async (``async_loop``, run by
``runtimes.run_async_loop`` in process or on Ray).

    job = LoopJob(policy_dir, tasks, worlds_root, Path("runs/sync"), LoopHooks(on_step=print))
    history = run_sync_loop(job, SyncLoopConfig(steps=20))
    history = run_async_loop(replace(job, out_dir=Path("runs/async")), AsyncLoopConfig(workers=8))

One job per module: ``stream`` (task selection, order, sampling seeds), ``rollouts`` (group rollouts),
``evaluation``, ``config`` (``LoopConfig``), ``history`` (step records, wall clock), ``job`` (a run's inputs and
hooks), ``policy`` (trainer set-up, resume, checkpoints), ``generation`` (where rollouts are generated: an engine
in this process, ``engine_adapter.InProcessEngine``, or engine servers, ``trainer.vllm.remote.RemoteFleet``).
"""

from trainer.loops.async_loop import AsyncLoopConfig, RuntimeKind, admission_capacity
from trainer.loops.engine_adapter import InProcessEngine
from trainer.loops.history import LoopHistory, StepRecord
from trainer.loops.job import LoopHooks, LoopJob
from trainer.loops.runtimes import run_async_loop
from trainer.loops.stream import TaskFilter
from trainer.loops.sync import SyncLoopConfig, run_sync_loop

__all__ = [
    "AsyncLoopConfig",
    "InProcessEngine",
    "LoopHistory",
    "LoopHooks",
    "LoopJob",
    "RuntimeKind",
    "StepRecord",
    "SyncLoopConfig",
    "TaskFilter",
    "admission_capacity",
    "run_async_loop",
    "run_sync_loop",
]
