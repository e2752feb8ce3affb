"""``run_async_loop``: the fully-async loop on the runtime ``AsyncLoopConfig.runtime`` names — all in process
(``in_process``), the trainer in a child process (``subprocess_runtime``) or on Ray actors (``ray_runtime``, imported
only when asked for: ray is a heavy, optional import).
The runtimes depend on the loop (``async_loop``), never the other way round."""

from __future__ import annotations

from collections.abc import Callable

from trainer.loops.async_loop import AsyncLoopConfig, RuntimeKind
from trainer.loops.history import LoopHistory
from trainer.loops.in_process import run_in_process
from trainer.loops.job import LoopJob
from trainer.loops.subprocess_runtime import run_in_subprocess


def _run_on_ray(job: LoopJob, config: AsyncLoopConfig) -> LoopHistory:
    from trainer.loops.ray_runtime import run_on_ray  # ray is imported only when asked for

    return run_on_ray(job, config)


RUNTIMES: dict[RuntimeKind, Callable[[LoopJob, AsyncLoopConfig], LoopHistory]] = {
    RuntimeKind.ASYNCIO: run_in_process,
    RuntimeKind.SUBPROCESS: run_in_subprocess,
    RuntimeKind.RAY: _run_on_ray,
}


def run_async_loop(job: LoopJob, config: AsyncLoopConfig) -> LoopHistory:
    """Run (or resume from ``job.out_dir``'s newest checkpoint) the fully-async loop on the configured runtime;
    ``job.hooks.on_rollouts`` sees, after each step, every rollout that finished since the previous one."""
    return RUNTIMES[config.runtime](job, config)
