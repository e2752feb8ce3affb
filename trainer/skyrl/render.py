"""One cluster run (``SkyRLRun``) → the SkyRL 0.3.x overrides that launch it (``render``).

A run is one training loop of a stage: the hero's (the landed algorithm on the target model, fully async, Megatron
for training and vLLM engines for generation on separate nodes: RECIPE "Hero configuration"), or the overfit gate's
and each ablation arm's (synchronous: ``RolloutPlan.fully_async`` off), or a systems sweep trial. Keys are SkyRL
0.3.0's (``skyrl.train.config`` dataclasses), grouped below by what they express; a recipe setting SkyRL has no key
for goes to our own ``rl_recipe.`` section (our generator and entry point read it) with the reason beside it.

    overrides = render(run)                 # Overrides: .values {key: value}, .lines() sorted key=value
    overrides.skyrl_keys(), overrides.recipe_keys()

Not rendered, with the reason: the local trainer's ``token_budget`` (SkyRL packs micro-batches itself), the local
engine's ``compile`` flag and the systems stage's sweep (a cluster run takes the profile's values), and the cosine
floor ``min_lr_ratio`` (no cosine schedule on Megatron). The policy is exported in HF format at every checkpoint
(``trainer.hf_save_interval``): the stage evaluates the newest export on the run's engines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envs.harness.agent import HarnessConfig
from trainer.local.logprobs import Layout
from trainer.local.trainer import TrainerConfig
from trainer.sizing import ClusterLayout
from trainer.skyrl.mappings import UnsupportedSetting, algorithm_keys, lr_scheduler
from trainer.skyrl.values import RECIPE_SECTION, lines, problems, split_keys

PROJECT = "rl-recipe"
DEFAULT_STORAGE = "/tmp/rl-recipe"
"""Where checkpoints, exports, logs and the exported task sets go when no shared storage is given: node-local, so
only right for a dry run or a one-node cluster; pass a shared path or a cloud URI (s3://, gs://) for a real run."""


@dataclass(frozen=True)
class RolloutPlan:
    """The loop's shape: B prompts × n samples per step, K workers, staleness S, limits, cadences."""

    prompts_per_step: int
    samples_per_prompt: int
    workers: int
    max_staleness: int
    epochs: int
    steps: int
    checkpoint_every: int
    eval_every: int
    eval_passes: int
    max_concurrency: int | None = None
    rate_limit_per_s: float | None = None
    fully_async: bool = True
    """Off: SkyRL's synchronous trainer (generate a batch, train on it), as the overfit gate and the ablations run."""


@dataclass(frozen=True)
class SkyRLRun:
    """Everything one SkyRL launch needs, in our own types (the flows layer builds it from a profile)."""

    name: str
    """Run name (``trainer.run_name``), e.g. ``qwen36-35b-hero-dppo_prompt_mean_nudge``."""
    model: str
    """Hub id or a path every node reads."""
    trainer: TrainerConfig
    harness: HarnessConfig
    rollout: RolloutPlan
    layout: ClusterLayout
    max_model_len: int
    optimizer_offload_fraction: float = 0.0
    served_model_name: str | None = None
    seed: int = 0
    storage: str = DEFAULT_STORAGE
    engine_timeout_s: float = 600.0
    sandbox: str = "local"
    sandbox_pool_per_world: int = 2
    provenance: Mapping[str, str] = field(default_factory=dict)
    """Where the run comes from (profile, stage, arm): written to ``rl_recipe.*`` for the job's own records."""
    fleet_urls: tuple[str, ...] | None = None
    """The run's engines (their gates' URLs) the job generates with and syncs weights to; None: SkyRL starts engines
    of its own for the job (only when the run has none: two owners would double-book the GPUs, ``flows.ledger``)."""
    engine_token_file: str | None = None
    """The run's engine token (a path every node reads): the job's client and router send it to the gates."""


@dataclass(frozen=True)
class Overrides:
    """A rendered set: ``values`` keyed by dotted SkyRL (or ``rl_recipe.``) key."""

    values: dict[str, Any]

    def lines(self) -> list[str]:
        return lines(self.values)

    def skyrl_keys(self) -> list[str]:
        return split_keys(sorted(self.values))[0]

    def recipe_keys(self) -> list[str]:
        return split_keys(sorted(self.values))[1]


def _prefixed(prefix: str, keys: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{key}": value for key, value in keys.items()}


def _algorithm(run: SkyRLRun) -> dict[str, Any]:
    algorithm = run.trainer.algorithm
    return _prefixed(
        "trainer.algorithm",
        algorithm_keys(algorithm)
        | {
            # RECIPE: no KL loss (and no reference model at all).
            "use_kl_loss": False,
            "use_kl_in_reward": False,
            # Groups whose rewards all tie carry no signal: loss-masked, and in fully-async mode dropped and the
            # mini-batch refilled (trainer.fully_async.sample_full_batch below). Ours always filters; tol may be 0.
            "zero_variance_filter": True,
            "zero_variance_filter_tol": algorithm.zero_variance_tol,
        },
    )


def _optimizer(run: SkyRLRun) -> dict[str, Any]:
    trainer = run.trainer
    return _prefixed(
        "trainer.policy.optimizer_config",
        {
            "lr": trainer.lr,
            "adam_betas": list(trainer.betas),
            "weight_decay": trainer.weight_decay,
            "max_grad_norm": trainer.grad_clip,
            # SkyRL counts warm-up in mini-batch steps; with train batch = mini-batch that is our optimizer steps.
            "num_warmup_steps": trainer.warmup_steps,
            "scheduler": lr_scheduler(trainer.lr_schedule),
            # Param offload: SkyRL 0.3 moves weights and optimizer state off the GPUs between phases only when
            # training and generation share them (placement.colocate_all); the hero layout keeps them apart.
            "offload_after_step": False,
        },
    )


def _megatron(run: SkyRLRun) -> dict[str, Any]:
    layout, offload = run.layout, run.optimizer_offload_fraction
    return {
        "trainer.strategy": "megatron",
        "trainer.placement.colocate_all": False,
        "trainer.placement.policy_num_nodes": layout.train_nodes,
        "trainer.placement.policy_num_gpus_per_node": layout.gpus_per_node,
        # Packed micro-batches (our packed layout, and the nearest SkyRL has to our shared-prefix one); Megatron's
        # context parallel needs them.
        "trainer.remove_microbatch_padding": run.trainer.layout is not Layout.PADDED or layout.context_parallel > 1,
        # Our harness is text only: the vision tower of Qwen3.5 / 3.6 is never loaded, on either side.
        "trainer.policy.language_model_only": True,
    } | _prefixed(
        "trainer.policy.megatron_config",
        {
            "tensor_model_parallel_size": layout.tensor_parallel,
            "pipeline_model_parallel_size": layout.pipeline_parallel,
            "context_parallel_size": layout.context_parallel,
            "expert_model_parallel_size": layout.expert_parallel,
            # Experts are split over EP only (the planner's experts ÷ (EP·PP) per GPU); TP splits the dense part.
            "expert_tensor_parallel_size": 1,
            "optimizer_config_kwargs.optimizer_cpu_offload": offload > 0,
            "optimizer_config_kwargs.optimizer_offload_fraction": offload,
            "optimizer_config_kwargs.overlap_cpu_optimizer_d2h_h2d": offload > 0,
            "optimizer_config_kwargs.use_precision_aware_optimizer": offload > 0,
        },
    )


def _fully_async(run: SkyRLRun) -> dict[str, Any]:
    plan = run.rollout
    if not plan.fully_async:
        return {"trainer.fully_async.enabled": False}
    return _prefixed(
        "trainer.fully_async",
        {
            "enabled": True,
            "max_staleness_steps": plan.max_staleness,
            "num_parallel_generation_workers": plan.workers,
            "sample_full_batch": True,
        },
    )


def _rate_limit(run: SkyRLRun) -> dict[str, Any]:
    """SkyRL's ``RateLimiterConfig`` under ``generator.rate_limit`` (declared by generator configs that use it)."""
    plan = run.rollout
    if plan.rate_limit_per_s is not None and plan.rate_limit_per_s < 1.0:
        raise UnsupportedSetting(
            f"rollout.rate_limit_per_s {plan.rate_limit_per_s} is below SkyRL's minimum of 1 trajectory per second"
        )
    enabled = plan.rate_limit_per_s is not None or plan.max_concurrency is not None
    return _prefixed(
        "generator.rate_limit",
        {
            "enabled": enabled,
            "trajectories_per_second": None if plan.rate_limit_per_s is None else float(plan.rate_limit_per_s),
            "max_concurrency": plan.max_concurrency,
        },
    )


def _batches_and_lengths(run: SkyRLRun) -> dict[str, Any]:
    plan, harness = run.rollout, run.harness
    if harness.max_tokens_per_turn >= harness.context_budget_tokens:
        raise UnsupportedSetting(
            f"harness.max_tokens_per_turn {harness.max_tokens_per_turn} must be below context_budget_tokens "
            f"{harness.context_budget_tokens}: SkyRL's max_prompt_length is the budget less one turn"
        )
    sampling = {"temperature": harness.temperature, "top_p": harness.top_p}
    return (
        {
            # One optimizer step per batch of B groups: the train batch is the mini-batch (fully async requires it).
            "trainer.train_batch_size": plan.prompts_per_step,
            "trainer.policy_mini_batch_size": plan.prompts_per_step,
            "trainer.update_epochs_per_batch": 1,
            "generator.n_samples_per_prompt": plan.samples_per_prompt,
            "generator.batched": False,
            "generator.max_turns": harness.max_turns,
            # The whole trajectory (prompt + every turn) must fit the train context; the first prompt leaves room for
            # one full turn.
            "generator.max_input_length": harness.context_budget_tokens,
            "trainer.max_prompt_length": harness.context_budget_tokens - harness.max_tokens_per_turn,
            "generator.sampling_params.max_generate_length": harness.max_tokens_per_turn,
            "generator.apply_overlong_filtering": run.trainer.algorithm.overlong_filter,
            # Evals sample like training (k passes need distinct samples; SkyRL's default eval temperature is 0).
            "generator.eval_n_samples_per_prompt": plan.eval_passes,
            "generator.eval_sampling_params.max_generate_length": harness.max_tokens_per_turn,
        }
        | _prefixed("generator.sampling_params", sampling)
        | _prefixed("generator.eval_sampling_params", sampling)
    )


def _engines(run: SkyRLRun) -> dict[str, Any]:
    layout = run.layout
    keys = {
        "backend": "vllm",
        "run_engines_locally": True,
        "num_engines": layout.engines,
        "tensor_parallel_size": layout.engine_tensor_parallel,
        "gpu_memory_utilization": layout.gpu_memory_utilization,
        "weight_sync_backend": "nccl",
        "language_model_only": True,
        "engine_init_kwargs.max_model_len": run.max_model_len,
    }
    if layout.max_num_seqs is not None:
        keys["max_num_seqs"] = layout.max_num_seqs
    if run.served_model_name:
        keys["served_model_name"] = run.served_model_name
    if run.fleet_urls is not None:
        keys |= {
            # One owner: the run's fleet serves the job (SkyRL's "external servers": a vllm-router over them for
            # generation, each server's own routes for pause / resume / NCCL weight sync).
            "run_engines_locally": False,
            "external_server_urls": list(run.fleet_urls),
        }
    return _prefixed("generator.inference_engine", keys)


def _cadence_and_storage(run: SkyRLRun) -> dict[str, Any]:
    plan, storage = run.rollout, run.storage.rstrip("/")
    return {
        "trainer.epochs": plan.epochs,
        "trainer.max_training_steps": plan.steps,
        "trainer.ckpt_interval": plan.checkpoint_every,
        "trainer.hf_save_interval": plan.checkpoint_every if plan.checkpoint_every > 0 else plan.steps,
        "trainer.resume_mode": "latest",
        "trainer.ckpt_path": f"{storage}/ckpts",
        "trainer.export_path": f"{storage}/exports",
        "trainer.log_path": f"{storage}/logs",
        "trainer.eval_interval": plan.eval_every if plan.eval_every > 0 else -1,
        "trainer.eval_before_train": True,
        "trainer.seed": run.seed,
        "trainer.policy.model.path": run.model,
        # console: the metrics reach the Ray job's log, where trainer.skyrl.submit reads them into our catalog.
        "trainer.logger": "console",
        "trainer.project_name": PROJECT,
        "trainer.run_name": run.name,
        # Our task sets as parquet where every node reads them (written by the entry point, trainer.skyrl.main).
        "data.train_data": [f"{storage}/data/train.parquet"],
        "data.val_data": [f"{storage}/data/heldout.parquet"],
    }


def _recipe_section(run: SkyRLRun) -> dict[str, Any]:
    """Settings with no SkyRL 0.3.x key: the harness's own knobs (context nudge, tool-result cut, timeouts, the eval
    context), the adaptive length penalty, our engine client and sandboxes, and where the run comes from."""
    harness, algorithm = run.harness, run.trainer.algorithm
    return _prefixed(
        RECIPE_SECTION,
        {
            "harness.context_budget_tokens": harness.context_budget_tokens,
            "harness.eval_context_budget_tokens": run.max_model_len,
            "harness.context_nudge": harness.context_nudge,
            "harness.context_nudge_threshold": harness.context_nudge_threshold,
            "harness.tool_result_max_chars": harness.tool_result_max_chars,
            "harness.tool_timeout_s": harness.tool_timeout_s,
            "harness.agent_timeout_s": harness.agent_timeout_s,
            "harness.max_parse_retries": harness.max_parse_retries,
            "algorithm.alp_assistant_coef": algorithm.alp_assistant_coef,
            "algorithm.alp_env_coef": algorithm.alp_env_coef,
            "algorithm.alp_solve_threshold": algorithm.alp_solve_threshold,
            "engine.timeout_s": run.engine_timeout_s,
            "engine.token_file": run.engine_token_file,
            "sandbox.provider": run.sandbox,
            "sandbox.pool_per_world": run.sandbox_pool_per_world,
        }
        | {f"run.{key}": value for key, value in run.provenance.items()},
    )


SECTIONS = (
    _algorithm,
    _optimizer,
    _megatron,
    _fully_async,
    _rate_limit,
    _batches_and_lengths,
    _engines,
    _cadence_and_storage,
    _recipe_section,
)


def render(run: SkyRLRun) -> Overrides:
    """The overrides of ``run``; ``UnsupportedSetting`` for a setting SkyRL cannot express or a set that breaks one
    of its rules (``values.problems``)."""
    values: dict[str, Any] = {}
    for section in SECTIONS:
        keys = section(run)
        clash = values.keys() & keys.keys()
        if clash:
            raise AssertionError(f"{section.__name__} sets {sorted(clash)} again")
        values |= keys
    found = problems(values)
    if found:
        raise UnsupportedSetting("the SkyRL overrides break its rules: " + "; ".join(found))
    return Overrides(values)
