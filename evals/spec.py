"""What one eval is: ``EvalSpec`` — which tasks, through which harness, against which engine, how many passes, where.

spec = EvalSpec(tasks=TaskSource(kind="data", path=Path("data"), split="heldout"), harness="mcp",
                engine=EngineSpec(base_url="http://127.0.0.1:8000", model="policy", tokenizer="runs/x/policy"),
                passes=3, out_dir=Path("runs/evals/heldout"))
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envs.harness.agent import HarnessConfig
from envs.judge import JudgeConfig
from evals.sources import TaskSource


class HarnessKind(StrEnum):
    """Which tools the agent gets: the MCP apps, code-only tools (bash, read, write, …), or a terminal."""

    MCP = "mcp"
    CODE_ONLY = "code_only"
    TERMINAL = "terminal"


class McpBackend(StrEnum):
    """How the MCP harness reaches its tools: the stdio gateway in pooled sandboxes, or the apps in-process."""

    GATEWAY = "gateway"
    IN_PROCESS = "in_process"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineSpec(_Spec):
    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    tokenizer: str | None = Field(None, description="tokenizer folder or hub id; default: the model name")
    timeout_s: float = Field(600.0, gt=0.0)
    api_key_file: Path | None = Field(None, description="a file holding the engine's bearer token (a run's engines)")


SEEDING = "per-task-pass"
"""How trial seeds are derived (``evals.seeds.trial_seed``); part of an eval's identity, so a rerun never resumes
trials sampled under another scheme."""


AUDIT_FIELDS = {"audit_samples", "audit_repeats"}
"""How a judge is audited, not what it grades: no part of an eval's identity or of the judge client's settings."""


class JudgeSpec(_Spec):
    """The OpenAI-compatible judge of ``llm_judge`` criteria. Its keys come from the environment variable
    ``api_key_env`` (none: requests carry no key, as a local judge needs), never from the spec."""

    base_url: str = Field(min_length=1, description="OpenAI-compatible root, e.g. http://host:8000/v1")
    model: str = Field(min_length=1)
    api_key_env: str | None = None
    max_concurrency: int = Field(8, ge=1)
    audit_samples: int = Field(
        0, ge=0, description="graded samples to re-judge and to judge with an empty answer (envs.judge_audit)"
    )
    audit_repeats: int = Field(2, ge=1, description="re-judgements of each audited sample")

    def config(self) -> JudgeConfig:
        """The judge client's settings: these fields, the rest ``JudgeConfig``'s defaults (no keys in the spec)."""
        return JudgeConfig(**self.model_dump(exclude=AUDIT_FIELDS))


class HarnessOverrides(_Spec):
    """Changes to the policy's harness settings for this eval (unset fields keep the policy's, else the default)."""

    temperature: float | None = Field(None, ge=0.0)
    max_turns: int | None = Field(None, ge=1)
    max_tokens_per_turn: int | None = Field(None, ge=1)
    context_budget_tokens: int | None = Field(None, ge=2)
    agent_timeout_s: float | None = Field(None, gt=0.0)
    seed: int | None = None

    @classmethod
    def of(cls, config: HarnessConfig) -> HarnessOverrides:
        """Every field this class can override, as ``config`` sets it (a run's harness, pinned for its evals)."""
        return cls.model_validate(config.model_dump(include=set(cls.model_fields)))

    def apply(self, base: HarnessConfig) -> HarnessConfig:
        """``base`` with the set fields replaced (validated again)."""
        return HarnessConfig.model_validate(base.model_dump() | self.model_dump(exclude_none=True))


class EvalSpec(_Spec):
    """One eval: which tasks, through which harness, against which engine, how many passes, where to write."""

    # core
    tasks: TaskSource
    harness: HarnessKind = HarnessKind.MCP
    engine: EngineSpec
    passes: int = Field(3, ge=1)
    out_dir: Path
    # advanced
    concurrency: int = Field(8, ge=1, description="rollouts in flight at once")
    harness_config: HarnessOverrides = HarnessOverrides()
    policy: Path | None = Field(
        None, description="policy folder whose harness.json sets the harness (default: the tokenizer or model folder)"
    )
    infra_retries: int = Field(2, ge=0, description="re-runs of a trial that failed for infra reasons")
    mcp_backend: McpBackend = McpBackend.GATEWAY
    judge: JudgeSpec | None = Field(None, description="needed when a task has llm_judge criteria")

    def identity(self) -> dict[str, Any]:
        """What must match for a rerun to resume this run: what is evaluated and how, not where the results are
        written, where the engine listens (a model served again on another port is the same model) or how many
        trials run at once; likewise for the judge, only its model counts."""
        exclude: dict[str, Any] = {"out_dir": True, "concurrency": True, "engine": {"base_url", "timeout_s"}}
        # Without a judge (or a tier filter) the key is left out, so folders written before either existed still resume.
        exclude["judge"] = True if self.judge is None else {"base_url", "api_key_env", "max_concurrency", *AUDIT_FIELDS}
        if not self.tasks.tiers:
            exclude["tasks"] = {"tiers"}
        return self.model_dump(mode="json", exclude=exclude) | {"seeding": SEEDING}

    def policy_candidates(self) -> list[Path]:
        """Where the policy's ``harness.json`` is looked for: ``policy``, else the tokenizer and model folders."""
        if self.policy is not None:
            return [self.policy]
        names = [self.engine.tokenizer, self.engine.model]
        return [Path(name) for name in dict.fromkeys(n for n in names if n) if Path(name).is_dir()]
