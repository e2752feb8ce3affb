"""Reports render from structured summaries: the markdown tables hold the hand-computed rows, the PNGs exist, each run
keeps one colour across the plots, a run of one pass has no error bars, and provenance names the tasks evaluated."""

from pathlib import Path

import pytest

from envs.types import Split, Tier
from evals.records import EvalResult, EvalTimings
from evals.report import ReportRun, write_report
from evals.sources import SourceKind, TaskSource
from evals.spec import EngineSpec, EvalSpec
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


# --- plots: one colour per run, error bars only where there is an SE -------------------------------------------------


@pytest.fixture
def figures(monkeypatch) -> list:
    """The figures the report draws, kept open for the test instead of closed after saving."""
    from evals import report

    kept, pyplot = [], report._pyplot()

    class KeepingPyplot:
        def __getattr__(self, name: str):
            return getattr(pyplot, name)

        def close(self, figure) -> None:
            kept.append(figure)

    monkeypatch.setattr(report, "_pyplot", KeepingPyplot)
    yield kept
    for figure in kept:
        pyplot.close(figure)


def _bar_colours(ax) -> list[tuple]:
    from matplotlib.container import BarContainer

    return [patch.get_facecolor() for c in ax.containers if isinstance(c, BarContainer) for patch in c.patches]


def _error_bar_count(ax) -> int:
    from matplotlib.container import ErrorbarContainer

    return sum(len(c.lines[2][0].get_segments()) for c in ax.containers if isinstance(c, ErrorbarContainer))


def test_each_run_keeps_its_colour_in_every_plot(tmp_path: Path, figures):
    write_report([CAND], tmp_path, "x", baseline=BASE)
    by_domain, _, before_after = figures
    # By domain: the baseline's two bars (one per domain), then the candidate's two.
    base_colour, cand_colour = _bar_colours(by_domain.axes[0])[0], _bar_colours(by_domain.axes[0])[2]
    assert base_colour != cand_colour
    for ax in before_after.axes:  # baseline, then the candidate
        assert _bar_colours(ax) == [base_colour, cand_colour]
    assert _error_bar_count(by_domain.axes[0]) == 4 and _error_bar_count(before_after.axes[0]) == 2


def test_one_pass_draws_no_error_bars_and_says_1_pass(tmp_path: Path, figures):
    once = _run("once", {"a": (True, 1.0), "b": (False, 0.0), "c": (False, 0.5), "d": (True, 1.0)}, passes=1)
    write_report([once], tmp_path, "x", baseline=BASE)
    by_domain, _, before_after = figures
    ax = by_domain.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["base (2 passes)", "once (1 pass)"]
    assert _error_bar_count(ax) == 2  # the baseline's two domains; none for the run of one pass
    assert ax.get_title().endswith("mean ± SE over passes; runs of one pass have no error bar")
    assert _error_bar_count(before_after.axes[0]) == 1

    figures.clear()
    write_report([once], tmp_path / "alone", "x")
    assert _error_bar_count(figures[0].axes[0]) == 0 and figures[0].axes[0].get_title().endswith(
        "one pass, no error bars"
    )
    assert "| once | 4 | 1 | 0.500 (1 pass) |" in (tmp_path / "alone" / "report.md").read_text()


# --- provenance: which tasks were evaluated --------------------------------------------------------------------------


def _eval_result(source: TaskSource, run: ReportRun) -> EvalResult:
    spec = EvalSpec(tasks=source, engine=EngineSpec(base_url="http://e", model="m"), out_dir=Path("out"))
    timings = EvalTimings(
        started_at="t0", finished_at="t1", wall_s=1.0, trials_run=1, trials_resumed=0, mean_trial_wall_s=1.0
    )
    return EvalResult(spec=spec, summary=run.summary, counts={}, timings=timings)


@pytest.mark.parametrize(
    ("source", "run", "says"),
    [
        (
            TaskSource(kind=SourceKind.DATA, path=Path("data"), tiers=(Tier.TOY,)),
            _run("toy", {"a": (True, 1.0), "b": (True, 1.0)}),
            "data (held-out split, 2 tasks of tier toy)",
        ),
        (
            TaskSource(kind=SourceKind.DATA, path=Path("data"), split=Split.TRAIN),
            BASE,
            "data (train split, 4 tasks of tiers std 2, toy 2)",
        ),
        (TaskSource(kind=SourceKind.JSONL, path=Path("t.jsonl")), BASE, "t.jsonl (4 tasks of tiers std 2, toy 2)"),
        (TaskSource(kind=SourceKind.HARBOR, path=Path("tb")), BASE, "harbor:tb (4 tasks of tiers std 2, toy 2)"),
    ],
)
def test_provenance_names_the_source_split_tiers_and_task_count(source, run, says):
    assert ReportRun.from_eval(_eval_result(source, run)).provenance["tasks"] == says
