"""Each stage's section: its parameters and the thresholds of its gate (``config.stages.<stage>``). Thresholds live
here and nowhere else; they are never loosened to make a stage pass."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator

from envs.options import OracleTransport
from flows.config.base import (
    MAX_BAR,
    MAX_GIB,
    MAX_PARALLEL,
    MAX_STEPS,
    MAX_TOKENS,
    RewardBar,
    _messages,
    _Section,
    valid_harness_changes,
)
from trainer.algorithms.config import AlgorithmConfig
from trainer.local.config import Layout
from trainer.loops.kinds import LoopKind
from trainer.specs import RETENTION_DEFAULT_SOURCES, RetentionSource


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
    min_judge_agreement: float = Field(0.9, ge=0, le=1)
    """Share of a graded sample's re-judgements equal to its first verdict (``envs.judge_audit``)."""
    max_judge_empty_passes: int = Field(0, ge=0)
    """Empty answers over an unchanged world the judge passed."""


class DeriskStage(_Section):
    oracle_transport: OracleTransport = OracleTransport.STDIO
    """How the oracles reach the tools: the MCP gateway in pooled stdio sandboxes, as rollouts do."""
    oracle_worlds: tuple[str, ...] | None = None
    """Check the oracles of these worlds' tasks only (None: every task; the smoke profile checks one world)."""
    rollout_samples: int = Field(4, ge=2, le=MAX_STEPS)
    """The base's rollouts per train task (reward variance needs at least 2)."""
    judge_samples: int = Field(4, ge=0, le=MAX_STEPS)
    """Graded samples of ``llm_judge`` criteria to audit: the base answers this many judged tasks once, and each
    judgement is re-judged and set against an empty answer (0: not checked)."""
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
