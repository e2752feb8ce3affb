"""Reports render from structured summaries: the markdown tables hold the hand-computed rows, the PNGs exist."""

from pathlib import Path

import pytest

from evals.report import ReportRun, write_report
from evals.stats import summarize
from evals.types import TrialResult

DOMAINS = {"a": "investment_banking", "b": "investment_banking", "c": "corporate_law", "d": "corporate_law"}


def _run(name: str, outcomes: dict[str, tuple[bool, float]], passes: int = 2) -> ReportRun:
    """Every pass gives each task the same (passed, reward)."""
    trials = [
        TrialResult(task_id=t, pass_index=p, passed=ok, reward=r, domain=DOMAINS[t], tier="toy" if t < "c" else "std")
        for t, (ok, r) in outcomes.items()
        for p in range(passes)
    ]
    return ReportRun(name=name, summary=summarize(trials), trials=tuple(trials), provenance={"model": name})


BASE = _run("base", {"a": (False, 0.5), "b": (False, 0.5), "c": (False, 0.0), "d": (False, 0.0)})
CAND = _run("rl", {"a": (True, 1.0), "b": (True, 1.0), "c": (False, 0.5), "d": (False, 0.5)})


def test_report_tables_and_plots(tmp_path: Path):
    files = write_report([CAND], tmp_path, "held-out eval", baseline=BASE)
    text = files.markdown.read_text()
    assert text.startswith("# held-out eval\n")
    # base: Pass@1 0/4 per pass, reward (0.5+0.5+0+0)/4 = 0.25; rl: Pass@1 2/4, reward (1+1+0.5+0.5)/4 = 0.75.
    assert "| base | 4 | 2 | 0.000 ± 0.000 | 0.250 ± 0.000 | 0.000 (k=2) |" in text
    assert "| rl | 4 | 2 | 0.500 ± 0.000 | 0.750 ± 0.000 | 0.500 (k=2) |" in text
    assert "| investment_banking | rl | 2 | 1.000 ± 0.000 | 1.000 ± 0.000 |" in text
    assert "| std | rl | 2 | 0.000 ± 0.000 | 0.500 ± 0.000 |" in text
    # Pass@1 diffs per task (1, 1, 0, 0): a resample of only c, d has chance 1/16 > 2.5 %, so the CI reaches 0.
    assert (
        "| rl | Pass@1 | 0.000 | 0.500 | +0.500 | [+0.000, +1.000] | within noise | paired bootstrap, 4 tasks |" in text
    )
    # Mean-reward diffs are +0.5 on every task: every resample mean is 0.5.
    assert "| rl | mean reward | 0.250 | 0.750 | +0.500 | [+0.500, +0.500] | gain | paired bootstrap, 4 tasks |" in text
    assert "- **rl** — model: rl" in text
    assert [p.name for p in files.plots] == ["pass_at_1_by_domain.png", "mean_reward_by_domain.png", "before_after.png"]
    for plot in files.plots:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({plot.name})" in text


def test_summaries_without_trials_use_welch_and_mismatched_tasks_are_named(tmp_path: Path):
    noisy = _run("noisy", {"a": (True, 1.0), "b": (False, 0.0), "c": (False, 0.0), "d": (False, 0.0)}, passes=3)
    unpaired = ReportRun(name="summary-only", summary=noisy.summary)
    other = _run("other", {"a": (True, 1.0), "b": (True, 1.0)})
    files = write_report([unpaired, other], tmp_path, "mixed", baseline=BASE)
    text = files.markdown.read_text()
    welch = (
        "| summary-only | Pass@1 | 0.000 | 0.250 | +0.250 | [+0.250, +0.250] | gain | Welch t, no spread in either run"
    )
    assert welch in text
    assert "| other | Pass@1 | — | — | — | — | not comparable | the runs cover different tasks;" in text
    assert "before_after.png" in text


def test_report_refuses_duplicate_names_and_no_runs(tmp_path: Path):
    with pytest.raises(ValueError, match="run names must differ"):
        write_report([BASE], tmp_path, "x", baseline=BASE)
    with pytest.raises(ValueError, match="no runs"):
        write_report([], tmp_path, "x")
