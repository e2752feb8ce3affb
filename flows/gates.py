"""The gate contract: what a stage measured against the profile's thresholds, and the verdict.

A stage ends by building a ``GateReport`` from plain numbers (``stage_gates`` has one pure function per stage). The
report lists each criterion — name, measured value, comparison, threshold, passed, detail — plus findings a person
can act on ("slides_add_slide returns nothing on 100 % of successful calls: return a confirmation"). A report that
did not pass ends the stage flow as ``Failed(name="GateFailed")`` carrying a picklable ``GateFailed``; a code error
stays a plain ``Failed`` and infrastructure trouble is ``Crashed``.

    report = GateReport.build(StageName.OVERFIT, [check("reward gain", 0.12, Op.GE, 0.1)], metrics={...})
    report.passed, report.markdown()
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flows.config import StageName


class Op(StrEnum):
    GE = ">="
    GT = ">"
    LE = "<="
    LT = "<"
    EQ = "=="


_COMPARE: dict[Op, Callable[[float, float], bool]] = {
    Op.GE: operator.ge,
    Op.GT: operator.gt,
    Op.LE: operator.le,
    Op.LT: operator.lt,
    Op.EQ: operator.eq,
}


class GateCriterion(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    measured: float | None
    """None when the stage could not measure it (which fails the criterion)."""
    op: Op
    threshold: float
    passed: bool
    detail: str = ""


def check(name: str, measured: float | None, op: Op, threshold: float, detail: str = "") -> GateCriterion:
    """One criterion: ``measured op threshold``; a missing or NaN measurement fails."""
    ok = measured is not None and not math.isnan(measured) and _COMPARE[op](measured, threshold)
    return GateCriterion(name=name, measured=measured, op=op, threshold=threshold, passed=ok, detail=detail)


class Finding(BaseModel):
    """Something a person should fix, with the evidence: which tool, what rate, and the advice."""

    model_config = ConfigDict(frozen=True)

    subject: str
    """What it is about (a tool name, a suite, a knob)."""
    problem: str
    advice: str
    rate: float | None = None


class GateReport(BaseModel):
    stage: StageName
    passed: bool
    criteria: list[GateCriterion]
    findings: list[Finding] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    """What the stage measured beyond the criteria (JSON values), for the report and the audit trail."""
    artifacts: dict[str, str] = Field(default_factory=dict)
    """Name → path (relative to the run folder) of what the stage wrote: plots, tables, checkpoints."""
    not_checked: list[str] = Field(default_factory=list)
    """Checks the stage could not run, and why (a team's tasks without oracles): a pass means only what ran."""

    @classmethod
    def build(
        cls,
        stage: StageName,
        criteria: Sequence[GateCriterion],
        findings: Sequence[Finding] = (),
        metrics: dict[str, Any] | None = None,
        not_checked: Sequence[str] = (),
    ) -> GateReport:
        """A report that passes when every criterion passed (a gate without criteria does not pass)."""
        return cls(
            stage=stage,
            passed=bool(criteria) and all(c.passed for c in criteria),
            criteria=list(criteria),
            findings=list(findings),
            metrics=metrics or {},
            not_checked=list(not_checked),
        )

    def failed_criteria(self) -> list[GateCriterion]:
        return [c for c in self.criteria if not c.passed]

    def summary(self) -> str:
        """One line: the verdict and, when failed, the criteria that broke."""
        if self.passed:
            return f"{self.stage.folder}: gate passed ({len(self.criteria)} criteria)"
        broke = "; ".join(
            f"{c.name} {fmt(c.measured)} (needs {c.op} {fmt(c.threshold)})" for c in self.failed_criteria()
        )
        return f"{self.stage.folder}: gate failed: {broke}"

    def markdown(self) -> str:
        """The gate report as markdown: verdict, criteria table, each criterion's detail, findings. Details are a
        list below the table, not a column: a long one (the tools it names, a CI) pushed the Prefect UI's table past
        its pane, which cut the column off."""
        verdict = "PASSED" if self.passed else "FAILED"
        lines = [f"# Stage {self.stage.index} · {self.stage.value} — gate {verdict}", ""]
        lines += ["| criterion | measured | needs | verdict |", "|---|---|---|---|"]
        for c in self.criteria:
            mark = "pass" if c.passed else "**FAIL**"
            lines.append(f"| {plain(c.name)} | {fmt(c.measured)} | {c.op} {fmt(c.threshold)} | {mark} |")
        details = [f"- {plain(c.name)}: {plain(c.detail)}" for c in self.criteria if c.detail.strip()]
        if details:
            lines += ["", *details]
        if self.findings:
            lines += ["", "## Findings", ""]
            for f in self.findings:
                rate = "" if f.rate is None else f" ({f.rate:.1%})"
                lines.append(f"- **{plain(f.subject)}**{rate}: {plain(f.problem)} → {plain(f.advice)}")
        if self.not_checked:
            lines += ["", "## Not checked", "", *(f"- {plain(line)}" for line in self.not_checked)]
        return "\n".join(lines) + "\n"


_MARKDOWN = re.compile(r"([\\`*\[\]|])")
"""What could turn text into a link or an image (``[``, ``]``), a code span, emphasis or a new table cell."""


def plain(text: str) -> str:
    """``text`` shown as written in markdown: no HTML (``<img onerror>`` becomes text), no link, emphasis or table
    cell break (``[x](javascript:…)`` stays literal), on one line. Details and findings quote tool errors, task ids
    and model output, none of which is ours to render."""
    flat = " ".join(text.split())
    return _MARKDOWN.sub(r"\\\1", flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if float(value).is_integer() and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}"


class GateFailed(Exception):
    """A stage's gate did not hold. Picklable (it carries the report as JSON), so Prefect can persist it."""

    def __init__(self, report_json: str) -> None:
        super().__init__(report_json)
        self.report_json = report_json

    @property
    def report(self) -> GateReport:
        return GateReport.model_validate_json(self.report_json)

    def __str__(self) -> str:
        return self.report.summary()
