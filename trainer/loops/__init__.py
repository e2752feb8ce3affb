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

from envs.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "trainer.loops.async_loop": ["AsyncLoopConfig", "admission_capacity"],
        "trainer.loops.kinds": ["LoopKind", "RuntimeKind"],
        "trainer.loops.engine_adapter": ["InProcessEngine"],
        "trainer.loops.history": ["LoopHistory", "StepRecord"],
        "trainer.loops.job": ["LoopHooks", "LoopJob"],
        "trainer.loops.runtimes": ["run_async_loop"],
        "trainer.loops.stream": ["TaskFilter"],
        "trainer.loops.sync": ["SyncLoopConfig", "run_sync_loop"],
    },
)
