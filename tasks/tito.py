"""TITO task: multi-turn rollouts against the run's engine over its real wire protocol, recorded and checked.

The engine is reached the way a cluster reaches vLLM — ``/v1/completions`` over HTTP (the local engine on loopback,
or the configured URL) — and every exchange is recorded (``trainer.tito.RecordingEngine``), so the check compares
the trajectories with what actually crossed the wire, and with the trainer's batch built from them.

Under the stage's injected faults (``StageScope.faults``) the client's requests go through ``FaultTransport``
(dropped, 500, stalled: ``envs.faults``). A rollout such a fault ended is recorded with its error class
(``retryable_infra``) and left out of the check: it is never trained on, and its failed request crossed no wire, so
it is no TITO violation; the turns the engine did answer are checked in every other rollout.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from envs.faults import FaultPlan
from envs.harness.agent import AgentSetup, run_group
from envs.harness.engine_client import CompletionsClient
from envs.rollout import local_envs
from envs.tokens import bearer_keys
from envs.types import ErrorClass, Trajectory
from tasks.context import RolloutJob, StageScope
from tasks.engine import Endpoint, policy_endpoint
from trainer.tito import RecordingEngine, RetokenizingEngine, TitoReport, check_tito


async def _record(
    endpoint: Endpoint, job: RolloutJob, worlds_root: Path, faults: FaultPlan | None, retokenize: bool
) -> tuple[list[Trajectory], RecordingEngine]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(job.policy_dir)
    injector = faults.injector("engine") if faults else None
    keys = bearer_keys(endpoint.api_key_file)
    async with CompletionsClient(
        endpoint.url, endpoint.model, timeout_s=job.engine.timeout_s, faults=injector, keys=keys
    ) as client:
        recorder = RecordingEngine(client)
        engine = RetokenizingEngine(recorder, tokenizer) if retokenize else recorder
        groups = await asyncio.gather(
            *(
                run_group(
                    task,
                    local_envs(task, worlds_root, job.settings.apps),
                    AgentSetup(engine, tokenizer, job.harness(index)),
                    group_id=f"tito-{task.task_id}",
                    n=job.samples,
                )
                for index, task in enumerate(job.tasks)
            )
        )
    return [t for group in groups for t in group], recorder


@task(name="tito-rollouts", cache_policy=NO_CACHE)
def tito_rollouts(scope: StageScope, job: RolloutJob, retokenize: bool = False) -> TitoReport:
    """Roll out ``tasks`` ``samples`` times each through the engine's HTTP API; record every rollout and check every
    exchange of those no infra fault ended (see the module docstring). ``retokenize``: the gate matrix's defect, a
    harness that re-tokenises text between the wire and the trajectory (``RetokenizingEngine``)."""
    from transformers import AutoTokenizer

    with policy_endpoint(job.policy_dir, job.engine) as endpoint:
        trajectories, recorder = asyncio.run(_record(endpoint, job, scope.worlds, scope.faults, retokenize))
    scope.catalog.add_trajectories(scope.stage, "tito-rollouts", "base", trajectories, job.by_id())
    checked = [t for t in trajectories if t.error_class is not ErrorClass.RETRYABLE_INFRA]
    tokenizer = AutoTokenizer.from_pretrained(job.policy_dir)
    return check_tito(checked, recorder.exchanges, tokenizer, job.settings.harness)
