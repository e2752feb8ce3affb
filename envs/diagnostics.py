"""Per-tool diagnostics of the environment: which tool is broken, how often, and what to do about it.

The recipe's biggest pre-training wins came from reading per-tool failure rates in traces: a PowerPoint tool that
returned None on every success, a PDF reader that flattened two-column pages, missing Python packages. This module
turns per-tool statistics (computed elsewhere — the de-risk stage groups its catalog's ``tool_calls`` in DuckDB) into
``ToolFinding``s: the tool, the symptom with its rate, and advice a person can act on.

Three symptoms, each over the calls where it is meaningful:

* **fails on known-good calls** — failure rate over oracle steps and probes, whose arguments are right by
  construction, so a failure is the tool's (the error signature picks the advice: ``ModuleNotFoundError`` →
  preinstall the package);
* **returns nothing on success** — empty-output rate over successful calls from any source;
* **times out** — timeout rate over all calls;
* **misleads its callers** — the pass rate of oracles that call the tool: when a tool answers without an error but
  the oracles that use it fail, its output does not carry what the task needs (a layout-flattening PDF reader).

    findings = tool_findings(stats, ToolThresholds(max_failure_rate=0.01, ...))
    [f"{f.tool}: {f.problem} → {f.advice}" for f in findings]
"""

from __future__ import annotations

from dataclasses import dataclass

ADVICE_BY_SIGNATURE: dict[str, str] = {
    "ModuleNotFoundError": "preinstall the missing package in the sandbox image (the tool promises it is installed)",
    "ImportError": "preinstall or fix the package in the sandbox image; the import fails inside the sandbox",
    "timeout": "raise the tool's timeout or make the tool faster; check for hangs on special files",
    "PermissionError": "fix the sandbox's file permissions: the world copy must be writable by the tool",
    "FileNotFoundError": "check the world is copied whole into the sandbox (a file the oracle reads is missing)",
    "MemoryError": "raise the sandbox's memory limit or stream the input instead of loading it whole",
}
"""Advice per error signature (``envs.harness.tools.error_signature``) of calls with known-good arguments."""
DEFAULT_FAILURE_ADVICE = "read the error texts of these calls: the tool fails on arguments that are right"
EMPTY_ADVICE = "return a confirmation the model can read (what was written, where); an empty result looks like failure"
MISLEADING_ADVICE = (
    "compare the tool's output with the source document: it answers without an error but the oracles that use it "
    "fail (e.g. a PDF reader that flattens two-column pages interleaves lines — read each column separately)"
)


@dataclass(frozen=True)
class ToolStats:
    """What is known about one tool from a stage's calls (rates are None when their denominator is 0)."""

    tool: str
    calls: int
    failure_rate: float | None
    """Over calls with known-good arguments (oracle steps and probes)."""
    top_signature: str | None
    """The most frequent error signature among those failures."""
    empty_rate: float | None
    """Over successful calls from every source."""
    timeout_rate: float | None
    oracle_pass_rate: float | None
    """Share of tasks whose oracle calls this tool that the oracle solved."""
    model_failure_rate: float | None = None
    """Over the model's own calls (reported, not gated: a weak model's bad arguments are its errors, not the tool's)."""


@dataclass(frozen=True)
class ToolThresholds:
    max_failure_rate: float
    max_empty_rate: float
    max_timeout_rate: float
    min_oracle_pass_rate: float


@dataclass(frozen=True)
class ToolFinding:
    tool: str
    symptom: str
    rate: float
    threshold: float
    problem: str
    advice: str


def tool_findings(stats: list[ToolStats], thresholds: ToolThresholds) -> list[ToolFinding]:
    """Every tool × symptom whose rate is past its threshold, worst first within each symptom."""
    findings: list[ToolFinding] = []
    for s in stats:
        if s.failure_rate is not None and s.failure_rate > thresholds.max_failure_rate:
            signature = s.top_signature or "ToolError"
            findings.append(
                ToolFinding(
                    s.tool,
                    "fails",
                    s.failure_rate,
                    thresholds.max_failure_rate,
                    f"fails on {s.failure_rate:.0%} of calls with known-good arguments (mostly {signature})",
                    ADVICE_BY_SIGNATURE.get(signature, DEFAULT_FAILURE_ADVICE),
                )
            )
        if s.empty_rate is not None and s.empty_rate > thresholds.max_empty_rate:
            findings.append(
                ToolFinding(
                    s.tool,
                    "returns_empty",
                    s.empty_rate,
                    thresholds.max_empty_rate,
                    f"returns nothing on {s.empty_rate:.0%} of successful calls",
                    EMPTY_ADVICE,
                )
            )
        if s.timeout_rate is not None and s.timeout_rate > thresholds.max_timeout_rate:
            findings.append(
                ToolFinding(
                    s.tool,
                    "times_out",
                    s.timeout_rate,
                    thresholds.max_timeout_rate,
                    f"times out on {s.timeout_rate:.0%} of calls",
                    ADVICE_BY_SIGNATURE["timeout"],
                )
            )
        misleads = s.failure_rate is None or s.failure_rate <= thresholds.max_failure_rate
        if s.oracle_pass_rate is not None and s.oracle_pass_rate < thresholds.min_oracle_pass_rate and misleads:
            findings.append(
                ToolFinding(
                    s.tool,
                    "misleads",
                    s.oracle_pass_rate,
                    thresholds.min_oracle_pass_rate,
                    f"only {s.oracle_pass_rate:.0%} of the oracles that call it solve their task",
                    MISLEADING_ADVICE,
                )
            )
    return sorted(findings, key=lambda f: (f.symptom, -abs(f.rate - f.threshold)))
