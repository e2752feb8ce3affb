"""Eval reports from structured results: ``report.md`` with tables and PNG plots (matplotlib, Agg backend).

``write_report(runs, out_dir, title, baseline=None)`` takes ``EvalResult``s (or ``ReportRun``s built from any
``Summary`` + trials, e.g. ``ReportRun.from_mcq``) and writes:

* ``report.md`` — per run: Pass@1 and mean reward as mean ± SE over passes, pass@k at the largest k; the same per
  domain and per tier; with a baseline, candidate − baseline per metric with its 95 % CI and verdict
  (``evals.compare``: paired bootstrap over shared tasks when both runs carry trials, else Welch's interval on
  per-pass summaries; "within noise" when the CI covers 0); then provenance (what each run was, when).
* ``pass_at_1_by_domain.png``, ``mean_reward_by_domain.png`` — bars per domain and run, SE error bars;
* ``before_after.png`` (with a baseline) — baseline vs each run on both metrics, SE error bars, Δ and verdict.

Each run keeps one colour in every plot (the baseline grey). A run of one pass has no SE, so its bars carry no error
bar. Provenance names the task set as evaluated: source, split, tiers and number of tasks.

Nothing is re-parsed from markdown: every number comes from the ``Summary`` / ``Comparison`` objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from envs.types import Split
from evals.compare import paired_comparison, unpaired_comparison
from evals.sources import SourceKind, TaskSource
from evals.types import Comparison, Estimate, Metric, Summary, TrialResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from evals.mcq import McqResult
    from evals.records import EvalResult

REPORT_FILE = "report.md"
METRIC_LABELS = {
    Metric.PASS_AT_1: "Pass@1 (share of tasks fully solved)",
    Metric.MEAN_REWARD: "mean reward (share of rubric criteria met)",
}
METRIC_NAMES = {Metric.PASS_AT_1: "Pass@1", Metric.MEAN_REWARD: "mean reward"}
SPLIT_NAMES = {Split.TRAIN: "train", Split.HELDOUT: "held-out"}
BASELINE_COLOUR = "#9e9e9e"
RUN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``1 pass``, ``3 passes``: a count with its noun in the right number."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def tasks_text(summary: Summary) -> str:
    """How many tasks of which tiers were evaluated: ``89 tasks of tier toy``, ``159 tasks of tiers deliverable 26,
    standard 44, toy 89``; just the count for tasks without tiers (MCQ questions)."""
    tiers = summary.by_tier
    if not tiers:
        return counted(summary.n_tasks, "task")
    if len(tiers) == 1:
        return f"{counted(summary.n_tasks, 'task')} of tier {next(iter(tiers))}"
    each = ", ".join(f"{tier} {part.n_tasks}" for tier, part in sorted(tiers.items()))
    return f"{counted(summary.n_tasks, 'task')} of tiers {each}"


def _source_text(source: TaskSource, summary: Summary) -> str:
    """``data (held-out split, 89 tasks of tier toy)``: the source as the command line names it, then what of it was
    evaluated (the split only where the source has splits: a data folder)."""
    split = f"{SPLIT_NAMES[source.split]} split, " if source.kind is SourceKind.DATA else ""
    return f"{source.name} ({split}{tasks_text(summary)})"


@dataclass(frozen=True)
class ReportRun:
    """One run as the report sees it: a name, its summary, its trials (for paired comparisons), provenance lines."""

    name: str
    summary: Summary
    trials: tuple[TrialResult, ...] = ()
    provenance: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_eval(cls, result: EvalResult, name: str | None = None) -> ReportRun:
        spec = result.spec
        return cls(
            name=name or spec.out_dir.name,
            summary=result.summary,
            trials=tuple(result.trial_results()),
            provenance={
                "model": spec.engine.model,
                "engine": spec.engine.base_url,
                "harness": spec.harness.value,
                "tasks": _source_text(spec.tasks, result.summary),
                "passes": str(spec.passes),
                "finished": result.timings.finished_at,
                "folder": str(spec.out_dir),
            },
        )

    @classmethod
    def from_mcq(cls, result: McqResult, name: str | None = None) -> ReportRun:
        from evals.stats import summarize

        trials = result.trial_results()
        return cls(
            name=name or f"mcq {result.model}",
            summary=summarize(trials),
            trials=tuple(trials),
            provenance={"model": result.model, "api": result.api.value, "questions": str(result.n_questions)},
        )


def _as_run(run: ReportRun | EvalResult) -> ReportRun:
    return run if isinstance(run, ReportRun) else ReportRun.from_eval(run)


def fmt_estimate(est: Estimate) -> str:
    """``0.512 ± 0.013`` (mean ± SE); a single pass has no SE: ``0.512 (1 pass)``."""
    return f"{est.mean:.3f} (1 pass)" if est.se is None else f"{est.mean:.3f} ± {est.se:.3f}"


def compare_runs(baseline: ReportRun, candidate: ReportRun, metric: Metric) -> Comparison:
    """Paired bootstrap when both runs carry trials, else Welch's interval on the per-pass summaries."""
    if baseline.trials and candidate.trials:
        return paired_comparison(baseline.trials, candidate.trials, metric)
    return unpaired_comparison(baseline.summary.estimate(metric), candidate.summary.estimate(metric), metric)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def _overall_rows(runs: Sequence[ReportRun]) -> list[list[str]]:
    rows = []
    for run in runs:
        s = run.summary
        k = max(s.pass_at_k)
        rows.append(
            [
                run.name,
                str(s.n_tasks),
                str(s.n_passes),
                fmt_estimate(s.pass_at_1),
                fmt_estimate(s.mean_reward),
                f"{s.pass_at_k[k]:.3f} (k={k})",
            ]
        )
    return rows


def _breakdown_rows(runs: Sequence[ReportRun], axis: str) -> list[list[str]]:
    groups = sorted({group for run in runs for group in getattr(run.summary, axis)})
    rows = []
    for group in groups:
        for run in runs:
            part = getattr(run.summary, axis).get(group)
            if part is not None:
                rows.append(
                    [group, run.name, str(part.n_tasks), fmt_estimate(part.pass_at_1), fmt_estimate(part.mean_reward)]
                )
    return rows


def _comparison_rows(baseline: ReportRun, runs: Sequence[ReportRun]) -> tuple[list[list[str]], dict]:
    rows, found = [], {}
    for run in runs:
        for metric in Metric:
            try:
                c = compare_runs(baseline, run, metric)
            except ValueError as error:
                rows.append([run.name, METRIC_NAMES[metric], "—", "—", "—", "—", "not comparable", str(error)])
                continue
            found[(run.name, metric)] = c
            welch = "Welch t, no spread in either run" if c.df is None else f"Welch t, df={c.df:.1f}"
            method = f"paired bootstrap, {c.n_tasks} tasks" if c.n_tasks else welch
            rows.append(
                [
                    run.name,
                    METRIC_NAMES[metric],
                    f"{c.baseline_mean:.3f}",
                    f"{c.candidate_mean:.3f}",
                    f"{c.mean_diff:+.3f}",
                    f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}]",
                    c.verdict.value.replace("_", " "),
                    method,
                ]
            )
    return rows, found


# --- plots -----------------------------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def _colours(baseline: ReportRun | None, runs: Sequence[ReportRun]) -> dict[str, str]:
    """One colour per run for every plot (the baseline grey), so a reader matches runs across plots by colour."""
    colours = {run.name: RUN_COLOURS[i % len(RUN_COLOURS)] for i, run in enumerate(runs)}
    return colours | ({baseline.name: BASELINE_COLOUR} if baseline is not None else {})


def _error_bars(ax: Axes, xs: Sequence[float], estimates: Sequence[Estimate | None], capsize: float) -> None:
    """SE error bars where there is an SE: an estimate from one pass has none, and a zero-length cap would claim one."""
    shown = [(x, e) for x, e in zip(xs, estimates, strict=True) if e is not None and e.se is not None]
    if shown:
        ax.errorbar(
            [x for x, _ in shown],
            [e.mean for _, e in shown],
            yerr=[e.se for _, e in shown],
            fmt="none",
            ecolor="black",
            capsize=capsize,
        )


def _spread_note(runs: Sequence[ReportRun]) -> str:
    """What the error bars of a plot of ``runs`` show, as its title says."""
    single = [run for run in runs if run.summary.n_passes == 1]
    if len(single) == len(runs):
        return "one pass, no error bars"
    return "mean ± SE over passes" + ("; runs of one pass have no error bar" if single else "")


def _bars_by_domain(runs: Sequence[ReportRun], metric: Metric, colours: dict[str, str], path: Path) -> Path:
    plt = _pyplot()
    domains = sorted({d for run in runs for d in run.summary.by_domain}) or ["all tasks"]
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(domains) * max(1, len(runs) / 2)), 4.5))
    for i, run in enumerate(runs):
        parts = [run.summary.by_domain.get(d, run.summary if d == "all tasks" else None) for d in domains]
        estimates = [p.estimate(metric) if p is not None else None for p in parts]
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(domains))]
        label = f"{run.name} ({counted(run.summary.n_passes, 'pass', 'passes')})"
        bars = ax.bar(xs, [e.mean if e else 0.0 for e in estimates], width, color=colours[run.name], label=label)
        _error_bars(ax, xs, estimates, capsize=4)
        for bar, part in zip(bars, parts, strict=True):
            if part is not None:
                ax.annotate(
                    f"n={part.n_tasks}",
                    (bar.get_x() + bar.get_width() / 2, 0),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    xytext=(0, 2),
                    textcoords="offset points",
                )
    ax.set_xticks(range(len(domains)), [d.replace("_", " ") for d in domains])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("domain (n = tasks per bar)")
    ax.set_ylabel(METRIC_LABELS[metric])
    ax.set_title(f"{METRIC_NAMES[metric]} by domain\n{_spread_note(runs)}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _before_after(
    baseline: ReportRun, runs: Sequence[ReportRun], found: dict, colours: dict[str, str], path: Path
) -> Path:
    plt = _pyplot()
    metrics = list(Metric)
    shown = [baseline, *runs]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4.5), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        estimates = [run.summary.estimate(metric) for run in shown]
        xs = list(range(len(shown)))
        ax.bar(xs, [e.mean for e in estimates], color=[colours[run.name] for run in shown])
        _error_bars(ax, xs, estimates, capsize=5)
        labels = [f"{baseline.name}\n(baseline)"]
        for run in runs:
            c = found.get((run.name, metric))
            verdict = f"\nΔ {c.mean_diff:+.3f}, {c.verdict.value.replace('_', ' ')}" if c else "\nnot comparable"
            labels.append(run.name + verdict)
        ax.set_xticks(xs, labels, fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(METRIC_LABELS[metric])
        ax.set_title(f"{METRIC_NAMES[metric]}: before / after (n={baseline.summary.n_tasks} tasks)")
    fig.suptitle(f"baseline vs candidate, {_spread_note(shown)}; Δ with 95 % CI verdict")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# --- the report ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    plots: tuple[Path, ...]


def write_report(
    runs: Sequence[ReportRun | EvalResult],
    out_dir: Path,
    title: str,
    baseline: ReportRun | EvalResult | None = None,
) -> ReportFiles:
    """Write ``report.md`` and the PNG plots for ``runs`` (compared with ``baseline`` when given) into ``out_dir``."""
    from envs.files import atomic_write_text

    if not runs:
        raise ValueError("no runs to report")
    shown = [_as_run(run) for run in runs]
    base = _as_run(baseline) if baseline is not None else None
    names = [run.name for run in ([base] if base else []) + shown]
    if len(set(names)) != len(names):
        raise ValueError(f"run names must differ to tell them apart in the report: {names}")
    out_dir.mkdir(parents=True, exist_ok=True)
    everyone = ([base] if base else []) + shown

    lines = [f"# {title}", "", f"Generated {datetime.now(UTC).isoformat(timespec='seconds')}.", ""]
    lines += [
        "Pass@1 = share of tasks fully solved, mean reward = share of rubric criteria met; both as mean ± SE over "
        "passes. pass@k is the unbiased estimator at the largest k.",
        "",
        "## Runs",
        "",
    ]
    lines += _table(["run", "tasks", "passes", "Pass@1", "mean reward", "pass@k"], _overall_rows(everyone))
    for axis, heading in (("by_domain", "domain"), ("by_tier", "tier")):
        rows = _breakdown_rows(everyone, axis)
        if rows:
            lines += [f"## Per {heading}", ""]
            lines += _table([heading, "run", "tasks", "Pass@1", "mean reward"], rows)
    colours = _colours(base, shown)
    plots = [_bars_by_domain(everyone, metric, colours, out_dir / f"{metric.value}_by_domain.png") for metric in Metric]
    if base is not None:
        rows, found = _comparison_rows(base, shown)
        lines += [f"## Versus baseline `{base.name}`", ""]
        lines += ["Candidate − baseline, 95 % CI; *within noise* when the CI covers 0.", ""]
        lines += _table(["run", "metric", "baseline", "candidate", "Δ", "95 % CI", "verdict", "method"], rows)
        plots.append(_before_after(base, shown, found, colours, out_dir / "before_after.png"))
    lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    lines += ["## Provenance", ""]
    for run in everyone:
        details = "; ".join(f"{key}: {value}" for key, value in run.provenance.items()) or "no details recorded"
        lines.append(f"- **{run.name}** — {details}")
    markdown = out_dir / REPORT_FILE
    atomic_write_text(markdown, "\n".join(lines) + "\n")
    return ReportFiles(markdown=markdown, plots=tuple(plots))
