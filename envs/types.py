"""Contracts of the environment layer: read this module first, import it everywhere.

Everything the rest of rl-recipe knows about an environment goes through these types:

* ``TaskSpec`` — one task: a prompt over a world, a rubric of ``Criterion`` objects, and an ``Oracle``
  (the scripted tool calls that solve it).
* ``Criterion`` — a discriminated union (field ``kind``) of the rubric checks the graders know.
* ``GradeResult`` — what grading a finished rollout returns (APEX-style: ``score`` is the share of
  criteria met, ``passed`` means all of them were met).

Example::

    task = TaskSpec(
        task_id="ib-1-toy-0001", world_id="ib-1", domain=Domain.INVESTMENT_BANKING, tier=Tier.TOY,
        prompt="What is FY2025 revenue in models/operating_model.xlsx (sheet Model, cell C5)?",
        rubric=[AnswerNumeric(expected=412.5, rel_tol=1e-3)],
        oracle=Oracle(steps=[OracleStep(tool="sheets.read_cell",
                                        args={"path": "models/operating_model.xlsx", "sheet": "Model", "cell": "C5"},
                                        save_as="revenue")],
                      answer="${revenue}"),
    )
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Domain(StrEnum):
    INVESTMENT_BANKING = "investment_banking"
    MANAGEMENT_CONSULTING = "management_consulting"
    CORPORATE_LAW = "corporate_law"
    TERMINAL = "terminal"
    GENERAL = "general"


class Tier(StrEnum):
    """Difficulty tiers. ``toy`` is what a tiny local model can learn; ``deliverable`` edits or writes files."""

    TOY = "toy"
    STANDARD = "standard"
    DELIVERABLE = "deliverable"


class Split(StrEnum):
    TRAIN = "train"
    HELDOUT = "heldout"


class _Contract(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- rubric criteria -------------------------------------------------------------------------------------------------


class AnswerEquals(_Contract):
    """The final answer equals ``expected`` (case- and whitespace-insensitive unless ``exact``)."""

    kind: Literal["answer_equals"] = "answer_equals"
    expected: str
    exact: bool = False


class AnswerNumeric(_Contract):
    """The final answer holds a number within tolerance of ``expected`` (``$``, ``,``, ``%`` and units ignored)."""

    kind: Literal["answer_numeric"] = "answer_numeric"
    expected: float
    rel_tol: float = 1e-3
    abs_tol: float = 1e-6


class AnswerContainsAll(_Contract):
    """The final answer contains every item (case-insensitive)."""

    kind: Literal["answer_contains_all"] = "answer_contains_all"
    items: list[str] = Field(min_length=1)


class FileExists(_Contract):
    """``path`` (relative to the world's ``filesystem/``) exists after the rollout."""

    kind: Literal["file_exists"] = "file_exists"
    path: str


class XlsxCellEquals(_Contract):
    """The computed value of ``sheet!cell`` in ``path`` equals ``expected`` (numbers within ``tol``)."""

    kind: Literal["xlsx_cell_equals"] = "xlsx_cell_equals"
    path: str
    sheet: str
    cell: str
    expected: float | str
    tol: float = 1e-6


class _DocumentContains(_Contract):
    """The text of the document ``path`` contains every item (case-insensitive)."""

    kind: str  # first in the schema and in every dump, as the other criteria; each subclass fixes it
    path: str
    items: list[str] = Field(min_length=1)


class DocxContains(_DocumentContains):
    """The text of the Word document ``path`` contains every item (case-insensitive)."""

    kind: Literal["docx_contains"] = "docx_contains"


class PptxContains(_DocumentContains):
    """The text of the slide deck ``path`` contains every item (case-insensitive)."""

    kind: Literal["pptx_contains"] = "pptx_contains"


class FileUnchanged(_Contract):
    """``path`` has the same bytes after the rollout as in the pristine world (a before/after diff)."""

    kind: Literal["file_unchanged"] = "file_unchanged"
    path: str


class LlmJudge(_Contract):
    """A natural-language criterion, judged later by an OpenAI-compatible judge model."""

    kind: Literal["llm_judge"] = "llm_judge"
    criteria: str = Field(min_length=1)
    verifier_id: str | None = None


class VerifierReward(_Contract):
    """The task's own verifier (Harbor ``tests/test.sh``) reported a reward of at least ``min_reward``.

    The verifier writes ``/logs/verifier/reward.txt`` (one float) or ``reward.json`` (``{"reward": x}`` or a dict of
    floats, averaged); the rollout maps that folder into the world as ``logs/verifier/``.
    """

    kind: Literal["verifier_reward"] = "verifier_reward"
    min_reward: float = 1.0


class VerifiersReward(_Contract):
    """A ``verifiers`` environment's own rewards (``@vf.reward``) on the final reply reach ``min_reward``: scored by
    the task's ``score`` in the verifiers venv (``envs.byo.verifiers_env``)."""

    kind: Literal["verifiers_reward"] = "verifiers_reward"
    environment: str
    task: int = Field(ge=0)
    """The task's position in its taskset."""
    python: str
    path: str | None = None
    min_reward: float = 1.0
    timeout_s: float = 60.0


Criterion = Annotated[
    AnswerEquals
    | AnswerNumeric
    | AnswerContainsAll
    | FileExists
    | XlsxCellEquals
    | DocxContains
    | PptxContains
    | FileUnchanged
    | LlmJudge
    | VerifierReward
    | VerifiersReward,
    Field(discriminator="kind"),
]


# --- oracle ----------------------------------------------------------------------------------------------------------


class OracleStep(_Contract):
    """One scripted tool call. String arguments may reference earlier outputs as ``${name}``.

    ``extract`` is an optional regex: the saved output is its first group (or whole match) instead of the raw text.
    """

    tool: str = Field(pattern=r"^[a-z][a-z0-9_]*\.[A-Za-z0-9_-]+$")
    args: dict[str, Any] = Field(default_factory=dict)
    save_as: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    extract: str | None = None


class Oracle(_Contract):
    """The scripted solution of a task: tool calls in order, then the final answer (a ``${name}`` template)."""

    steps: list[OracleStep] = Field(default_factory=list)
    answer: str | None = None


# --- task ------------------------------------------------------------------------------------------------------------


class TaskSpec(_Contract):
    task_id: str = Field(min_length=1)
    world_id: str = Field(min_length=1)
    domain: Domain
    tier: Tier = Tier.STANDARD
    split: Split = Split.TRAIN
    prompt: str = Field(min_length=1)
    rubric: list[Criterion] = Field(min_length=1)
    input_files: list[str] = Field(default_factory=list)
    expected_outputs: list[str] = Field(default_factory=list)
    oracle: Oracle | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("task_id", "world_id")
    @classmethod
    def _no_path_separators(cls, value: str) -> str:
        if "/" in value or "\\" in value or value in {".", ".."}:
            raise ValueError(f"must not contain path separators: {value!r}")
        return value

    @property
    def needs_judge(self) -> bool:
        """Some rubric criterion is ``llm_judge``: grading the task takes a judge."""
        return any(isinstance(criterion, LlmJudge) for criterion in self.rubric)


# --- grading ---------------------------------------------------------------------------------------------------------


class CriterionResult(_Contract):
    kind: str
    passed: bool
    detail: str = ""


class GradeResult(_Contract):
    criteria: list[CriterionResult]
    score: float = Field(ge=0.0, le=1.0, description="share of criteria met")
    passed: bool = Field(description="all criteria met (APEX-style task pass)")


# --- rollouts --------------------------------------------------------------------------------------------------------


class StopReason(StrEnum):
    STOP = "stop"  # the model gave a final answer
    LENGTH = "length"  # per-turn or total token budget ran out
    CONTEXT_LENGTH = "context_length"  # the next turn would not fit the context window
    TIMEOUT = "timeout"  # the agent timeout fired
    ERROR = "error"  # see ``error_class``


class ErrorClass(StrEnum):
    """Who is to blame for a failed rollout: decides retry (infra) versus keep-as-training-signal (model)."""

    RETRYABLE_INFRA = "retryable_infra"  # sandbox / engine / tool transport: retry the rollout, do not train on it
    MODEL = "model"  # bad tool calls, context overflow, timeout: a real outcome of the policy
    TASK = "task"  # the task itself is broken (missing world, ungradable rubric)


NO_POLICY_OUTCOME = frozenset({ErrorClass.RETRYABLE_INFRA, ErrorClass.TASK})
"""Error classes of rollouts that are no outcome of the policy: never graded, trained on or scored."""


class ToolCallRecord(_Contract):
    turn: int
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    ok: bool
    error_class: str | None = None  # e.g. "ToolError", "ModuleNotFoundError", "timeout", "transport"
    error: str | None = None
    returned_empty: bool = False
    latency_s: float = 0.0


class TurnSpan(_Contract):
    """Token span ``[start, end)`` of one assistant turn inside ``Trajectory.tokens``."""

    turn: int
    start: int
    end: int
    finish_reason: str
    weight_version: int | None = None


class Trajectory(BaseModel):
    """One rollout, token-exact (TITO): ``tokens``, ``loss_mask`` and ``logprobs`` only ever grow by appending.

    ``loss_mask[i] == 1`` exactly for tokens the engine sampled; ``logprobs[i]`` is the engine's logprob of that
    token (0.0 where masked). ``tokens[:prompt_len]`` is the initial prompt.
    """

    model_config = ConfigDict(extra="forbid")

    task_id: str
    group_id: str
    sample_index: int = 0
    harness: str = "mcp"
    tokens: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    prompt_len: int = 0
    turns: list[TurnSpan] = Field(default_factory=list)
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    final_answer: str | None = None
    reward: float = 0.0
    criteria: list[CriterionResult] = Field(default_factory=list)
    passed: bool = False
    stop_reason: StopReason = StopReason.STOP
    error_class: ErrorClass | None = None
    error: str | None = None
    weight_versions: list[int] = Field(default_factory=list)
    llm_s: float = 0.0
    env_s: float = 0.0
    nudges: int = 0
    """Observations the harness appended the context nudge to (``HarnessConfig.context_nudge``; 0 with it off)."""
