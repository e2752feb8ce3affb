"""TITO task: multi-turn rollouts against the run's engine over its real wire protocol, recorded and checked.

The engine is reached the way a cluster reaches vLLM — ``/v1/completions`` over HTTP (the local engine on loopback,
or the configured URL) — and every exchange is recorded (``trainer.tito.RecordingEngine``), so the check compares
the trajectories with what actually crossed the wire, and with the trainer's batch built from them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from envs.harness.agent import run_group
from envs.harness.engine_client import CompletionsClient
from envs.harness.policy import PolicyHarness
from envs.rollout import local_envs
from envs.types import TaskSpec, Trajectory
from tasks.catalog import Catalog
from tasks.engine import EngineSettings, policy_endpoint
from trainer.loops.common import group_seed
from trainer.tito import RecordingEngine, TitoReport, check_tito


async def _record(
    url: str,
    model: str,
    policy_dir: Path,
    tasks: Sequence[TaskSpec],
    worlds_root: Path,
    settings: PolicyHarness,
    samples: int,
    seed: int,
    timeout_s: float,
) -> tuple[list[Trajectory], RecordingEngine]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    async with CompletionsClient(url, model, timeout_s=timeout_s) as client:
        engine = RecordingEngine(client)
        groups = await asyncio.gather(
            *(
                run_group(
                    task,
                    local_envs(task, worlds_root, settings.apps),
                    engine,
                    tokenizer,
                    settings.harness.model_copy(update={"seed": group_seed(seed, index)}),
                    group_id=f"tito-{task.task_id}",
                    n=samples,
                )
                for index, task in enumerate(tasks)
            )
        )
    return [t for group in groups for t in group], engine


@task(name="tito-rollouts", cache_policy=NO_CACHE)
def tito_rollouts(
    catalog: Catalog,
    stage: str,
    policy_dir: Path,
    tasks: Sequence[TaskSpec],
    worlds_root: Path,
    settings: PolicyHarness,
    engine: EngineSettings,
    samples: int,
    seed: int,
) -> TitoReport:
    """Roll out ``tasks`` ``samples`` times each through the engine's HTTP API; record and check every exchange."""
    from transformers import AutoTokenizer

    with policy_endpoint(policy_dir, engine) as endpoint:
        trajectories, recorder = asyncio.run(
            _record(
                endpoint.url, endpoint.model, policy_dir, tasks, worlds_root, settings, samples, seed, engine.timeout_s
            )
        )
    catalog.add_trajectories(stage, "tito-rollouts", "base", trajectories, {t.task_id: t for t in tasks})
    return check_tito(trajectories, recorder.exchanges, AutoTokenizer.from_pretrained(policy_dir))
