"""The real run's entry point (``submit.ENTRY_MODULE``): SkyRL's trainer with our harness as its generator.

    python -m trainer.skyrl.main KEY=VALUE ...        # the rendered overrides (``render``), as a Ray Job runs it

1. parses the overrides into SkyRL's config, extended by ``schema_check.recipe_config_class`` (the generator config
   declares SkyRL's ``RateLimiterConfig`` as ``rate_limit``, the top level our ``rl_recipe`` section); runs
   ``validate_cfg``;
2. builds (or reuses) our environment under ``RECIPE_DATA_DIR`` (default ``data`` in the job's working dir; set it
   with ``recipe cluster submit --env``), and exports its train tasks — or the stage's own, ``RECIPE_TASKS_FILE`` —
   and its heldout tasks to the parquet files SkyRL reads (``data.train_data`` / ``data.val_data``): columns
   ``prompt`` (the task as one user message, for SkyRL's length filter), ``env_class`` and ``task_id``
   (``generator.TASK_ID_KEY``, what our generator looks the task up by);
3. runs SkyRL's experiment with ``RecipeGenerator`` as the generator (harness knobs from ``rl_recipe.harness.*``,
   world copies under ``RECIPE_DATA_DIR/worlds``) and, with ``trainer.fully_async.enabled``, SkyRL's fully-async
   trainer; with ``RECIPE_SHARDS_DIR`` the generator writes every training batch's rollouts there as shards, which
   the stage that submitted the job ingests into the run's catalog. The experiment runs off the head node (as
   SkyRL's own entry point): ``RECIPE_DATA_DIR`` must be storage the node running it reads, like
   ``trainer.ckpt_path``, unless the cluster is one node.

Cluster only: imports SkyRL, Ray and SkyRL's training stack; the core install never imports this module.
"""

# No ``from __future__ import annotations``: SkyRL resolves nested config classes from real field types.
import os  # noqa: I001  (the generator's import readies SkyRL's before they run, so it comes first)
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.skyrl.engine_auth import GatedInferenceClient, engine_token
from trainer.skyrl.generator import ENV_CLASS, TASK_ID_KEY, RecipeGenerator
from trainer.skyrl.schema_check import recipe_config_class

import ray
from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.utils.utils import initialize_ray, validate_cfg

from envs.build import ensure_environment, load_tasks
from envs.loaders import load_jsonl
from envs.harness.agent import AgentSetup, HarnessConfig
from envs.rollout import local_envs
from envs.types import Split, TaskSpec
from trainer.cluster.shards import ShardWriter

DATA_DIR_ENV = "RECIPE_DATA_DIR"
TASKS_FILE_ENV = "RECIPE_TASKS_FILE"
"""A JSONL task file (``envs.loaders.save_jsonl``): the tasks this run trains on (a stage's job sets it)."""
SHARDS_ENV = "RECIPE_SHARDS_DIR"
"""Where the generator writes its rollouts as shards (``trainer.cluster.shards``) for the stage to ingest."""
HARNESS_KEYS = frozenset(HarnessConfig.model_fields)


RecipeSkyRLConfig = recipe_config_class()


def harness_config(cfg: RecipeSkyRLConfig) -> HarnessConfig:
    """Our harness knobs: the rendered ``rl_recipe.harness.*`` plus the ones SkyRL keys carry (turns, lengths,
    sampling), exactly as ``render`` split them."""
    ours = {k: v for k, v in cfg.rl_recipe.get("harness", {}).items() if k in HARNESS_KEYS}
    sampling = cfg.generator.sampling_params
    return HarnessConfig(
        **ours,
        max_turns=cfg.generator.max_turns,
        max_tokens_per_turn=sampling.max_generate_length,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
    )


def export_tasks(tasks: Sequence[TaskSpec], path: str) -> None:
    """``tasks`` as the parquet SkyRL's ``PromptDataset`` reads (columns: the module docstring's step 2)."""
    import datasets

    rows = [
        {"prompt": [{"role": "user", "content": t.prompt}], "env_class": ENV_CLASS, TASK_ID_KEY: t.task_id}
        for t in tasks
    ]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(rows).to_parquet(path)


class RecipeExp(BasePPOExp):
    """SkyRL's experiment with our generator and, when fully async, SkyRL's fully-async trainer."""

    def __init__(self, cfg: RecipeSkyRLConfig, data: Path, tasks: Mapping[str, TaskSpec], shards: str | None) -> None:
        self.data, self.tasks, self.shards = data, tasks, shards
        super().__init__(cfg)

    def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> RecipeGenerator:
        worlds = self.data / "worlds"
        return RecipeGenerator(
            inference_engine_client,
            AgentSetup(None, tokenizer, harness_config(cfg)),  # the generator puts SkyRL's engine in per batch
            self.tasks,
            lambda task: local_envs(task, worlds),
            model=resolve_policy_model_name(cfg),
            overlong_filter=cfg.generator.apply_overlong_filtering,
            shards=ShardWriter(Path(self.shards)) if self.shards else None,
        )

    def get_inference_client(self) -> Any:
        """SkyRL's client, on the run's engines with their token. The vllm-router SkyRL puts over them gets no key:
        it passes each request's own ``Authorization`` on, so an engine behind it still answers only the token's
        holder. (Given ``api_key``, vllm-router 0.1.14-0.1.17 adds it to the fan-out routes — ``/pause`` and the
        like — for any caller: ``tests/trainer/skyrl/test_engine_auth.py``.)"""
        token = engine_token(self.cfg)
        client = super().get_inference_client()
        return client if token is None else GatedInferenceClient.of(client, token)

    def get_trainer(self, cfg: Any, *args: Any, **kwargs: Any) -> Any:
        if not cfg.trainer.fully_async.enabled:
            return super().get_trainer(cfg, *args, **kwargs)
        from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer

        return FullyAsyncRayPPOTrainer(cfg, *args, **kwargs)


@ray.remote(num_cpus=1)
def _run(cfg: RecipeSkyRLConfig, data: str, tasks: dict[str, TaskSpec], shards: str | None) -> None:
    RecipeExp(cfg, Path(data), tasks, shards).run()  # as SkyRL's own entry point: not on the head node


def main(argv: Sequence[str]) -> int:
    cfg = RecipeSkyRLConfig.from_cli_overrides(list(argv))
    validate_cfg(cfg)
    data = Path(os.environ.get(DATA_DIR_ENV, "data")).resolve()
    ensure_environment(data, seed=cfg.trainer.seed)
    tasks = load_tasks(data)
    chosen = os.environ.get(TASKS_FILE_ENV)  # a stage's own tasks (the overfit subset, ...); default: every train task
    train = load_jsonl(Path(chosen)) if chosen else [t for t in tasks if t.split is Split.TRAIN]
    export_tasks(train, cfg.data.train_data[0])
    if cfg.data.val_data:
        export_tasks([t for t in tasks if t.split is Split.HELDOUT], cfg.data.val_data[0])
    initialize_ray(cfg)
    shards = os.environ.get(SHARDS_ENV)
    ray.get(_run.remote(cfg, str(data), {t.task_id: t for t in [*tasks, *train]}, shards))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
