"""``AuditedJudge`` by hand: which calls are audited, what a re-judgement or an empty answer found, and that a failing
judge call is recorded rather than changing the trial's grade. (Over HTTP with a real judge server and a real eval:
``tests/evals/test_apex_eval.py``.)"""

import pytest

from envs.graders import JudgeVerdict
from envs.judge_audit import EMPTY_ANSWER, AuditedJudge


class Scripted:
    """A judge answering from a list of verdicts (True / False / an exception), in call order."""

    def __init__(self, script: list) -> None:
        self.script, self.calls = list(script), []

    def judge(self, task_prompt: str, criterion_text: str, answer: str | None, evidence: str) -> JudgeVerdict:
        self.calls.append(answer)
        outcome = self.script.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return JudgeVerdict(outcome, "scripted")


def test_only_the_first_samples_are_audited_and_the_first_verdict_is_returned() -> None:
    inner = Scripted([True, False, True, False, True, False])
    judge = AuditedJudge(inner, "m", samples=1, repeats=2)
    assert judge.judge("p", "c", "answer", "e").passed is True  # first, then 2 re-judgements and the empty answer
    assert judge.judge("p", "c", "answer", "e").passed is True  # the second call is not audited
    assert inner.calls == ["answer", "answer", "answer", EMPTY_ANSWER, "answer"]
    [sample] = judge.audit.samples
    assert (sample.first, sample.rejudged, sample.empty_passed) == (True, [False, True], False)
    assert (judge.audit.agreements, judge.audit.rejudgements, judge.audit.agreement) == (1, 2, 0.5)
    assert judge.audit.empty_passes == 0


def test_a_failing_re_judgement_counts_against_agreement_and_is_recorded() -> None:
    judge = AuditedJudge(Scripted([False, RuntimeError("judge down"), False, True]), "m", samples=1)
    assert judge.judge("p", "c", "a", "e").passed is False
    [sample] = judge.audit.samples
    assert sample.rejudged == [None, False] and sample.empty_passed is True
    assert judge.audit.agreement == 0.5 and judge.audit.failed_calls == 1
    assert sample.reasons == ["RuntimeError: judge down"]


def test_a_grading_call_that_fails_is_raised_and_kept_as_a_failure() -> None:
    judge = AuditedJudge(Scripted([TimeoutError("no answer")]), "m", samples=2)
    with pytest.raises(TimeoutError):
        judge.judge("p", "c", "a", "e")
    assert judge.audit.samples == [] and judge.audit.failures == ["TimeoutError: no answer"]
    assert judge.audit.agreement is None
