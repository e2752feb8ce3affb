"""What an eval records: ``TrialRecord`` (one finished trial, a line of ``trials.jsonl``), ``EvalResult`` (the
finished eval, ``eval.json``) and the ``Progress`` its callback gets after each trial."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from envs.harness.policy import PolicyHarness
from envs.types import NO_POLICY_OUTCOME, ErrorClass, StopReason, TaskSpec, Trajectory
from evals.spec import EvalSpec
from evals.types import Summary, TrialResult


class TrialRecord(BaseModel):
    """One finished trial as written to ``trials.jsonl``: a trajectory's summary, not its tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    pass_index: int = Field(ge=0)
    domain: str | None = None
    tier: str | None = None
    harness: str
    reward: float
    passed: bool
    stop_reason: StopReason
    error_class: ErrorClass | None = None
    error: str | None = None
    attempts: int = Field(ge=1)
    turns: int
    prompt_tokens: int
    completion_tokens: int = Field(description="tokens the model sampled (loss mask 1)")
    total_tokens: int
    tool_calls: int
    tool_errors: int
    tool_calls_by_tool: dict[str, int] = Field(default_factory=dict)
    llm_s: float
    env_s: float
    wall_s: float
    finished_at: str

    @classmethod
    def from_trajectory(
        cls, task: TaskSpec, pass_index: int, trajectory: Trajectory, attempts: int, wall_s: float
    ) -> TrialRecord:
        return cls(
            task_id=task.task_id,
            pass_index=pass_index,
            domain=task.domain.value,
            tier=task.tier.value,
            harness=trajectory.harness,
            reward=trajectory.reward,  # 0 for a trial that was not graded (infra or task failure)
            passed=trajectory.passed,
            stop_reason=trajectory.stop_reason,
            error_class=trajectory.error_class,
            error=None if trajectory.error is None else trajectory.error[:500],
            attempts=attempts,
            turns=len(trajectory.turns),
            prompt_tokens=trajectory.prompt_len,
            completion_tokens=sum(trajectory.loss_mask),
            total_tokens=len(trajectory.tokens),
            tool_calls=len(trajectory.tool_calls),
            tool_errors=sum(not call.ok for call in trajectory.tool_calls),
            tool_calls_by_tool=dict(Counter(call.tool for call in trajectory.tool_calls)),
            llm_s=trajectory.llm_s,
            env_s=trajectory.env_s,
            wall_s=wall_s,
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )

    @property
    def key(self) -> tuple[str, int]:
        return self.task_id, self.pass_index

    def trial_result(self) -> TrialResult:
        return TrialResult(
            task_id=self.task_id,
            pass_index=self.pass_index,
            passed=self.passed,
            reward=self.reward,
            domain=self.domain,
            tier=self.tier,
        )


class EvalTimings(BaseModel):
    started_at: str
    finished_at: str
    wall_s: float = Field(description="this invocation's wall-clock time (a resumed run counts only its own part)")
    trials_run: int = Field(description="trials run by this invocation")
    trials_resumed: int = Field(description="trials found finished in trials.jsonl")
    mean_trial_wall_s: float


class EvalResult(BaseModel):
    """A finished eval: ``eval.json`` holds all of it but ``trials`` (those live in ``trials.jsonl``)."""

    spec: EvalSpec
    summary: Summary
    counts: dict[str, dict[str, int]] = Field(description="trials per stop_reason and per error_class")
    timings: EvalTimings
    harness: PolicyHarness | None = Field(
        None, description="the harness that ran: the policy's harness.json + overrides (None in older eval.json files)"
    )
    harness_source: Path | None = Field(None, description="the harness.json read; None: the HarnessConfig defaults")
    trials: list[TrialRecord] = Field(default_factory=list, exclude=True)

    def trial_results(self) -> list[TrialResult]:
        return [trial.trial_result() for trial in self.trials]

    def unscored(self) -> list[TrialRecord]:
        """Trials that are no outcome of the policy: infra failures (after retries) and broken tasks."""
        return [t for t in self.trials if t.error_class in NO_POLICY_OUTCOME]


@dataclass(frozen=True)
class Progress:
    """Passed to the progress callback after each finished trial (``done`` counts resumed trials too)."""

    done: int
    total: int
    resumed: int
    record: TrialRecord | None  # None for the first call, made before any trial runs


ProgressFn = Callable[[Progress], None]
