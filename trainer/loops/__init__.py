"""RL loops over the local trainer and engine: synchronous (``sync``) and fully-async (``async_loop``).

    history = run_sync_loop(policy_dir, tasks, worlds_root, SyncLoopConfig(steps=20), Path("runs/sync"))
    history = run_async_loop(policy_dir, tasks, worlds_root, AsyncLoopConfig(workers=8), Path("runs/async"))

``engine_adapter`` holds the ``WeightSync`` protocol (in-process engine, remote HTTP engine) and ``push_weights``.
"""

from trainer.loops.async_loop import AsyncLoopConfig, RuntimeKind, admission_capacity, run_async_loop
from trainer.loops.common import LoopHistory, StepRecord, TaskFilter
from trainer.loops.engine_adapter import HttpEngineControl, InProcessEngine, WeightSync, push_weights
from trainer.loops.sync import SyncLoopConfig, run_sync_loop

__all__ = [
    "AsyncLoopConfig",
    "HttpEngineControl",
    "InProcessEngine",
    "LoopHistory",
    "RuntimeKind",
    "StepRecord",
    "SyncLoopConfig",
    "TaskFilter",
    "WeightSync",
    "admission_capacity",
    "push_weights",
    "run_async_loop",
    "run_sync_loop",
]
