"""What decides the local profile's base model, as data: the tiny Qwen3's shape (``TinyModelSpec``) and the bootstrap
that trains it (``BootstrapSpec``: traces, noise, steps; its JSON is the cache key). Pydantic only, so a profile that
names them validates without loading torch or transformers (``trainer.model`` and ``trainer.bootstrap`` build them).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envs.harness.chat import ToolListing
from envs.harness.tool_formats.base import ToolFormatName
from envs.options import APP_NAMES
from envs.types import Tier

# Every prompt token costs a tiny model's training time: the base gets a one-line instruction, and the tool listing
# (signatures only) follows it.
SMALL_MODEL_INSTRUCTIONS = "Use the tools. When you know the answer, reply with the answer only."


class PolicySource(StrEnum):
    """Where a run's base policy comes from (``policy.source``)."""

    BOOTSTRAP = "bootstrap"  # the local profile's tiny base, built here and cached by content hash
    FOLDER = "folder"  # a policy folder on disk (save_policy output or a HF checkpoint with harness.json)
    HUB = "hub"  # a hub id served by the cluster's engines (cluster profiles)


class TinyModelSpec(BaseModel):
    """Shape of the locally built Qwen3 policy (defaults: ~0.9 M parameters besides the embedding)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    layers: int = Field(4, ge=1)
    hidden: int = Field(128, ge=8)
    heads: int = Field(2, ge=1)
    kv_heads: int = Field(1, ge=1)
    head_dim: int = Field(64, ge=2, multiple_of=2)
    intermediate: int = Field(384, ge=1)
    max_position: int = Field(4096, ge=16)
    rope_theta: float = Field(1_000_000.0, gt=0)
    rms_norm_eps: float = Field(1e-6, gt=0)
    initializer_range: float = Field(0.02, gt=0)
    seed: int = Field(0, ge=0, lt=2**63)

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyModelSpec:
        if self.heads % self.kv_heads:
            raise ValueError(
                f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads} (grouped-query attention)"
            )
        return self


class NoiseKind(StrEnum):
    WRONG_TOOL = "wrong_tool"
    WRONG_FILE = "wrong_file"
    WRONG_ARGUMENT = "wrong_argument"


class NoiseRates(BaseModel):
    """Probability that a training trace's first call is wrong in each way (the rest are oracle traces)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    wrong_tool: float = Field(0.10, ge=0, le=1)
    wrong_file: float = Field(0.08, ge=0, le=1)
    wrong_argument: float = Field(0.07, ge=0, le=1)

    @model_validator(mode="after")
    def _at_most_one(self) -> NoiseRates:
        if sum(self.by_kind().values()) > 1:
            raise ValueError(f"noise rates sum to {sum(self.by_kind().values()):g}; they must sum to at most 1")
        return self

    def by_kind(self) -> dict[NoiseKind, float]:
        return {kind: getattr(self, kind.value) for kind in NoiseKind}


class BootstrapSpec(BaseModel):
    """Everything that decides the base model (the cache key hashes it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # core
    seed: int = Field(0, ge=0, lt=2**63)
    model: TinyModelSpec = TinyModelSpec(max_position=1024)
    vocab_size: int = Field(2048, ge=300)
    tiers: tuple[Tier, ...] = Field((Tier.TOY,), min_length=1)
    apps: tuple[str, ...] = Field(("filesystem", "sheets"), min_length=1)
    noise: NoiseRates = NoiseRates()
    value_swap: float = Field(
        0.5, ge=0, le=1, description="share of clean traces whose observed value is another task's (answer follows)"
    )
    recover_after_error: float = Field(
        0.5,
        ge=0,
        le=1,
        description="share of wrong first calls that fail (the tool answers with an error) followed by the oracle's "
        "calls and answer, as an agent that reads the error would (multi-call rollouts); the others are answered from "
        "the error text, which keeps the copy skill practised on text it never saw",
    )
    tool_listing: ToolListing = Field(ToolListing.SIGNATURES, description="how the first prompt lists the tools")
    tool_format: ToolFormatName = Field(
        ToolFormatName.HERMES_JSON,
        description="the tool-call dialect the base learns (the profile's harness.tool_format)",
    )
    thinking: bool | None = Field(
        None, description="the base reasons in <think> before each turn (the profile's harness.thinking)"
    )
    system_prompt: str = Field(SMALL_MODEL_INSTRUCTIONS, min_length=1)
    worlds: tuple[int, ...] | None = Field(
        None,
        description="imitate only the train tasks of these world numbers (e.g. [1, 2]: worlds 4, 5, … then stay new "
        "to the base, for RL to train on); None: every train world",
    )
    code_only_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="share of each task's traces recorded in the code-only harness (bash running the app CLI), so the "
        "base can work through bash as well and the transfer stage's code-only suite has something to lose",
    )
    mcq_examples_per_question: int = Field(
        0,
        ge=0,
        description="examples per question of the bundled multiple-choice suite (trainer.mcq_examples): the knowledge "
        "the transfer stage's regression suite checks the trained policy kept",
    )
    terminal_examples_per_task: int = Field(
        0,
        ge=0,
        description="examples per bundled terminal task, each solved by its reference script in one bash call "
        "(trainer.terminal_examples): the shell work the transfer stage's terminal suite checks the policy kept",
    )
    probe_examples_per_task: int = Field(
        0,
        ge=0,
        description="with a team's own environment (own_environment): examples per train task and probe call, each "
        "the call and an answer copied from what it returned (trainer.probe_examples), so a base new to those tools "
        "explores them",
    )
    own_environment: Path | None = Field(
        None,
        description="the build of a team's own environment (envs.byo) whose probes the base is taught; set by the "
        "de-risk stage when the profile names one (the cache key hashes its content digest, not its path)",
    )
    train_task_limit: int | None = Field(
        None, ge=1, description="imitate only the first N train tasks (the smoke profile's base, built in a minute)"
    )
    steps: int = Field(450, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(3e-3, gt=0)
    max_wall_seconds: float = Field(
        1800.0, gt=0, description="safety stop (recorded in the report); the step count, not this, should end training"
    )
    # advanced
    traces_per_task: int = Field(16, ge=1, description="training traces drawn per train task (noise drawn per trace)")
    warmup_steps: int = Field(20, ge=0)
    log_every: int = Field(50, ge=1)
    parity_checks: int = Field(4, ge=0, description="traces replayed through run_agent (clean and noisy)")
    eval_samples: int = Field(4, ge=0, description="sampled rollouts per task for Pass@1 (0: no eval)")
    max_tokens_per_turn: int = Field(96, ge=1)
    terminal_max_tokens_per_turn: int = Field(
        384, ge=1, description="the terminal harness's turn limit: the taught scripts run 60-300 tokens"
    )
    max_turns: int = Field(4, ge=1)

    @model_validator(mode="after")
    def _known_apps(self) -> BootstrapSpec:
        unknown = sorted(set(self.apps) - set(APP_NAMES))
        if unknown:
            raise ValueError(f"unknown apps {unknown}; apps are: {', '.join(APP_NAMES)}")
        return self


class RetentionSource(StrEnum):
    """A format of a bootstrapped base's imitation examples (``trainer.retention``)."""

    APP_TOOLS = "app_tools"  # the MCP-harness traces: what RL itself trains on
    CODE_ONLY = "code_only"  # the same tasks through bash over the app CLI
    TERMINAL = "terminal"  # the bundled terminal tasks, each by its reference script
    MCQ = "mcq"  # the bundled multiple-choice questions


RETENTION_DEFAULT_SOURCES = (RetentionSource.CODE_ONLY, RetentionSource.TERMINAL, RetentionSource.MCQ)
"""The taught formats the transfer stage checks and RL on the app tools does not practise."""
