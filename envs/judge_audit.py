"""Judge sanity on graded samples: does the judge agree with itself, and does it refuse an empty answer?

``AuditedJudge`` wraps any ``envs.graders.Judge``. Its first ``samples`` calls are graded samples: each one, once the
verdict that grades the trial is in, is judged again ``repeats`` times with the same task, criterion, answer and
evidence (same inputs, so a sound judge at temperature 0 gives the same verdict), and once more with an empty answer
over an unchanged world (no answer can meet a criterion, so a sound judge fails it). The verdict returned is always
the first one: auditing never changes a trial's grade.

``JudgeAudit`` is what it found: agreement = re-judgements equal to the first verdict / re-judgements (a re-judgement
that fails counts against it), empty passes = empty answers the judge passed. De-risk's gate reads it
(``flows.stage_gates``): a judge that flips on the same input, or passes an empty answer, would reward noise.
"""

from __future__ import annotations

import threading

from pydantic import BaseModel, Field

from envs.graders import Judge, JudgeVerdict

JUDGE_AUDIT_FILE = "judge_audit.json"
EMPTY_ANSWER = ""
EMPTY_EVIDENCE = "World changes: no files changed"
"""What the grader shows the judge for a rollout that changed nothing (``envs.graders._Context.evidence``)."""
MAX_REASON_CHARS = 300


class AuditedSample(BaseModel):
    """One graded sample: the first verdict, its re-judgements, and the verdict on an empty answer."""

    criterion: str
    answer: str | None
    first: bool
    rejudged: list[bool | None] = Field(description="each re-judgement's verdict; None: the call failed")
    empty_passed: bool | None = Field(description="the verdict on an empty answer; None: the call failed")
    reasons: list[str] = Field(default_factory=list, description="why each re-judgement or empty-answer call failed")


class JudgeAudit(BaseModel):
    """What auditing the judge found over its graded samples."""

    model: str
    samples: list[AuditedSample] = Field(default_factory=list)
    failures: list[str] = Field(
        default_factory=list, description="why grading calls failed (the first few): a judge that never answers"
    )

    @property
    def rejudgements(self) -> int:
        return sum(len(sample.rejudged) for sample in self.samples)

    @property
    def agreements(self) -> int:
        return sum(verdict == sample.first for sample in self.samples for verdict in sample.rejudged)

    @property
    def agreement(self) -> float | None:
        """Re-judgements equal to the first verdict / re-judgements (None: nothing was re-judged)."""
        return self.agreements / self.rejudgements if self.rejudgements else None

    @property
    def empty_passes(self) -> int:
        return sum(sample.empty_passed is True for sample in self.samples)

    @property
    def failed_calls(self) -> int:
        return sum(len(sample.reasons) for sample in self.samples)


class AuditedJudge:
    """A ``Judge`` that audits its first ``samples`` calls (module docstring); safe to call from several threads."""

    def __init__(self, inner: Judge, model: str, samples: int, repeats: int = 2) -> None:
        self._inner, self._samples, self._repeats = inner, samples, repeats
        self._lock = threading.Lock()
        self._claimed = 0
        self.audit = JudgeAudit(model=model)

    def judge(self, task_prompt: str, criterion_text: str, answer: str | None, evidence: str) -> JudgeVerdict:
        try:
            verdict = self._inner.judge(task_prompt, criterion_text, answer, evidence)
        except Exception as exc:
            with self._lock:
                if len(self.audit.failures) < self._samples:
                    self.audit.failures.append(_reason(exc))
            raise
        with self._lock:
            audited = self._claimed < self._samples
            self._claimed += audited
        if audited:
            sample = self._audit(task_prompt, criterion_text, answer, evidence, verdict)
            with self._lock:
                self.audit.samples.append(sample)
        return verdict

    def _audit(
        self, task_prompt: str, criterion_text: str, answer: str | None, evidence: str, first: JudgeVerdict
    ) -> AuditedSample:
        reasons: list[str] = []

        def ask(answer: str | None, evidence: str) -> bool | None:
            try:
                return self._inner.judge(task_prompt, criterion_text, answer, evidence).passed
            except Exception as exc:  # a failing judge call is a finding of the audit, not the trial's failure
                reasons.append(_reason(exc))
                return None

        rejudged = [ask(answer, evidence) for _ in range(self._repeats)]
        empty_passed = ask(EMPTY_ANSWER, EMPTY_EVIDENCE)
        return AuditedSample(
            criterion=criterion_text,
            answer=answer,
            first=first.passed,
            rejudged=rejudged,
            empty_passed=empty_passed,
            reasons=reasons,
        )


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_REASON_CHARS]
