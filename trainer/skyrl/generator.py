"""Our TITO harness as SkyRL's generator: the trajectories SkyRL trains on are exactly the ones ``run_group`` made.

SkyRL hands ``generate`` a flat batch: one row per sample, the ``n_samples_per_prompt`` rows of a prompt next to
each other (``prepare_generator_input``; the fully-async trainer sends one such group per call). ``RecipeGenerator``
runs ``run_group`` once per group of rows and returns one trajectory per row, in row order:

=====================  ==========================================================================================
GeneratorOutput        from our ``Trajectory``
=====================  ==========================================================================================
prompt_token_ids       ``tokens[:prompt_len]``: the first prompt (system + task + tool listing, our template render)
response_ids           ``tokens[prompt_len:]``: every turn and observation after it, never re-rendered
loss_masks             ``loss_mask[prompt_len:]`` (1 = sampled); all 0 for a rollout that is no outcome of the policy
                       (``retryable_infra`` / ``task``: our loops leave those out), and for a rollout that did not stop
                       on its own when ``generator.apply_overlong_filtering`` is on (SkyRL's filter, our semantics)
rollout_logprobs       ``logprobs[prompt_len:]``: the engine's logprob of each sampled token, 0.0 where masked
rewards                ``reward``, one float per trajectory (outcome reward; SkyRL takes per-trajectory floats)
stop_reasons           our ``StopReason`` values (``stop`` is the only natural end, as in SkyRL's filter)
trajectory_ids         the input's, unchanged
=====================  ==========================================================================================

Where the task travels: every row's ``env_extras`` holds ``task_id`` (``TASK_ID_KEY``), a column of the exported
task set (SkyRL's ``PromptDataset`` passes every column other than ``prompt`` and ``env_class`` as ``env_extras``);
the generator looks the ``TaskSpec`` up in the task set it was built with. SkyRL's own ``prompt`` column is not
used: the harness renders the first prompt itself, with the tools the task's environment lists.

The engine: SkyRL's inference engine client (``InferenceEngineInterface.generate``: token ids in, ids + logprobs +
stop reasons out) wrapped as our ``CompletionEngine`` (``SkyRLEngine``). Each turn's sampling is the harness's
(max tokens within the context budget, temperature, top-p, seed, EOS as stop token) over the batch's own
``sampling_params`` (SkyRL's vLLM defaults: ``min_tokens``, ``top_k``, ``min_p``, ...), with ``logprobs: 0`` so the
engine returns the sampled tokens' logprobs.

Imports SkyRL at module level: only the cluster path imports this module (``trainer.skyrl.main`` and its test).
Python 3.11: ``trainer.skyrl.py311`` readies SkyRL's imports first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import trainer.skyrl.py311  # noqa: F401  (before SkyRL: its TypedDicts on Python 3.11)

# isort: split
from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput, TrajectoryID
from skyrl.train.generators.utils import apply_overlong_filtering, get_rollout_metrics

from envs.harness.agent import AgentSetup, EnvsForTask, run_group
from envs.harness.engine_client import Completion, EngineError, EngineRejected, Sampling
from envs.types import NO_POLICY_OUTCOME, TaskSpec, Trajectory
from trainer.cluster.shards import ShardWriter

TASK_ID_KEY = "task_id"
"""The ``env_extras`` key (a column of the exported task set) that names each row's task."""
ENV_CLASS = "rl_recipe"
"""The ``env_class`` of our rows: SkyRL's gym environments are not used, our harness is the environment."""


def _refused(error: Exception) -> bool:
    """An HTTP 4xx other than 408 / 429 from SkyRL's client (aiohttp's ``status``): the request itself is wrong."""
    status = getattr(error, "status", None)
    return isinstance(status, int) and 400 <= status < 500 and status not in (408, 429)


class SkyRLEngine:
    """SkyRL's inference engine client as our ``CompletionEngine``: one prompt of token ids per request."""

    def __init__(self, client: Any, model: str | None = None, base_params: Mapping[str, Any] | None = None) -> None:
        self.client = client
        self.model = model
        self.base_params = dict(base_params or {})

    def params(self, sampling: Sampling) -> dict[str, Any]:
        """The batch's sampling params with the harness's per-turn fields on top; ``logprobs: 0`` asks for the
        sampled tokens' logprobs (SkyRL's client returns them when ``logprobs`` is not None)."""
        ours = {
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "seed": sampling.seed,
            "stop_token_ids": list(sampling.stop_token_ids),
            "logprobs": 0,
        }
        return self.base_params | ours

    async def complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion:
        request = {"prompt_token_ids": [list(prompt_ids)], "sampling_params": self.params(sampling)}
        try:
            output = await self.client.generate(request, model=self.model)
        except Exception as error:  # SkyRL's client raises its transport's errors: blame them as our client does
            message = f"SkyRL inference client: {type(error).__name__}: {error}"
            if _refused(error):
                raise EngineRejected(message) from error
            raise EngineError(message, retryable=True) from error
        token_ids = [int(t) for t in output["response_ids"][0]]
        logprobs = (output.get("response_logprobs") or [None])[0]
        if logprobs is None and token_ids:
            raise EngineRejected("SkyRL's inference client returned no logprobs for the sampled tokens")
        logprobs = [float(lp) for lp in logprobs or []]
        if len(logprobs) != len(token_ids):
            raise EngineRejected(f"the engine returned {len(token_ids)} token ids but {len(logprobs)} logprobs")
        return Completion(token_ids, logprobs, str(output["stop_reasons"][0]))


@dataclass(frozen=True)
class PromptGroup:
    """Rows ``start:end`` of a batch: the samples of one prompt (one ``run_group``)."""

    uid: str
    task_id: str
    start: int
    end: int


def prompt_groups(input_batch: GeneratorInput) -> list[PromptGroup]:
    """The batch's rows grouped by prompt: consecutive rows with one ``TrajectoryID.instance_id`` (or, without ids,
    one task id); every row of a group must name the same task."""
    extras = input_batch.get("env_extras") or []
    rows = len(input_batch["prompts"])
    if len(extras) != rows:
        raise ValueError(f"{rows} prompts but {len(extras)} env_extras: every row needs its {TASK_ID_KEY!r}")
    task_ids = [str(extra[TASK_ID_KEY]) for extra in extras]
    ids = input_batch.get("trajectory_ids")
    uids = [trajectory.instance_id for trajectory in ids] if ids else task_ids
    groups: list[PromptGroup] = []
    for row, (uid, task_id) in enumerate(zip(uids, task_ids, strict=True)):
        if groups and groups[-1].uid == uid:
            if groups[-1].task_id != task_id:
                raise ValueError(f"prompt {uid}: rows name tasks {groups[-1].task_id!r} and {task_id!r}")
            groups[-1] = replace(groups[-1], end=row + 1)
        else:
            groups.append(PromptGroup(uid, task_id, row, row + 1))
    return groups


def generator_output(
    trajectories: Sequence[Trajectory],
    trajectory_ids: list[TrajectoryID] | None = None,
    *,
    overlong_filter: bool = False,
) -> GeneratorOutput:
    """SkyRL's output for ``trajectories``, field by field from ours (the table in the module docstring)."""
    responses = [t.tokens[t.prompt_len :] for t in trajectories]
    masks = [
        [0] * len(r) if t.error_class in NO_POLICY_OUTCOME else t.loss_mask[t.prompt_len :]
        for t, r in zip(trajectories, responses, strict=True)
    ]
    stop_reasons = [str(t.stop_reason) for t in trajectories]
    if overlong_filter:
        masks = apply_overlong_filtering(masks, stop_reasons)
    rewards = [float(t.reward) for t in trajectories]
    times = [t.llm_s + t.env_s for t in trajectories]
    return GeneratorOutput(
        prompt_token_ids=[t.tokens[: t.prompt_len] for t in trajectories],
        response_ids=responses,
        rewards=rewards,
        loss_masks=masks,
        stop_reasons=stop_reasons,
        rollout_metrics=get_rollout_metrics(responses, rewards, loss_masks=masks, trajectory_completion_times=times),
        rollout_logprobs=[t.logprobs[t.prompt_len :] for t in trajectories],
        trajectory_ids=trajectory_ids,
        trajectory_generation_times=times,
        rollout_expert_indices=None,
        is_last_step=None,
        env_metrics=None,
        pixel_values=None,
        image_grid_thw=None,
    )


class RecipeGenerator(GeneratorInterface):
    """SkyRL's ``GeneratorInterface`` over our harness: ``run_group`` per prompt against SkyRL's engines.

    ``agent``: tokenizer, harness config and harness name (its engine is replaced per batch by ``SkyRLEngine``
    over ``client``); ``tasks``: the task set by id; ``envs_for``: each task's environment factory; ``shards``:
    where each training batch's rollouts are written, under its global step, for the stage to ingest."""

    def __init__(
        self,
        client: Any,
        agent: AgentSetup,
        tasks: Mapping[str, TaskSpec],
        envs_for: EnvsForTask,
        *,
        model: str | None = None,
        overlong_filter: bool = False,
        shards: ShardWriter | None = None,
    ) -> None:
        self.client = client
        self.shards = shards
        self.agent = agent
        self.tasks = dict(tasks)
        self.envs_for = envs_for
        self.model = model
        self.overlong_filter = overlong_filter

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        """One trajectory per input row, in row order (the groups run concurrently)."""
        trajectories = await self.rollouts(input_batch)
        return generator_output(trajectories, input_batch.get("trajectory_ids"), overlong_filter=self.overlong_filter)

    async def rollouts(self, input_batch: GeneratorInput) -> list[Trajectory]:
        """Our trajectories of the batch, one per row, in row order."""
        engine = SkyRLEngine(self.client, self.model, input_batch.get("sampling_params"))
        agent = replace(self.agent, engine=engine)
        groups = prompt_groups(input_batch)
        missing = sorted({group.task_id for group in groups} - self.tasks.keys())
        if missing:
            raise KeyError(f"tasks not in the generator's task set: {', '.join(missing)}")
        metadata = input_batch.get("batch_metadata")
        label = f"{metadata.training_phase}{metadata.global_step}" if metadata else "batch"
        runs = [self._group(agent, group, label) for group in groups]
        trajectories = [trajectory for group in await asyncio.gather(*runs) for trajectory in group]
        if self.shards is not None and metadata is not None and str(metadata.training_phase) == "train":
            await asyncio.to_thread(self.shards.rollouts, int(metadata.global_step), trajectories)
        return trajectories

    async def _group(self, agent: AgentSetup, group: PromptGroup, label: str) -> list[Trajectory]:
        task = self.tasks[group.task_id]
        group_id = f"{label}-{group.uid}-{task.task_id}"
        return await run_group(task, self.envs_for(task), agent, group_id=group_id, n=group.end - group.start)
