"""The stages' PNG plots (matplotlib, Agg backend): drawn from structured results, written into the run folder.

* ``bar_chart`` — one or two bar series per label (per-tool failure rates: known-good calls vs the model's);
* ``curves`` — reward per optimizer step of one or more loops;
* ``estimate_bars`` — means with ± error bars (ablation arms, base vs trained per suite).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from trainer.loops.history import StepRecord


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.tight_layout()
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)  # atomic: a reader never sees half a PNG
    _pyplot().close(fig)
    return path


def bar_chart(
    path: Path,
    first: Mapping[str, float],
    second: Mapping[str, float] | None,
    labels: Sequence[str],
    title: str,
) -> Path:
    plt = _pyplot()
    names = sorted(set(first) | set(second or {}))
    fig, axis = plt.subplots(figsize=(max(6, 0.45 * len(names) + 2), 4))
    width = 0.4 if second else 0.8
    xs = range(len(names))
    axis.bar([x - (width / 2 if second else 0) for x in xs], [first.get(n, 0.0) for n in names], width, label=labels[0])
    if second:
        axis.bar([x + width / 2 for x in xs], [second.get(n, 0.0) for n in names], width, label=labels[1])
    axis.set_xticks(list(xs), names, rotation=60, ha="right", fontsize=8)
    axis.set_ylim(0, 1.05)
    axis.set_title(title)
    axis.legend()
    return _save(fig, path)


def curves(path: Path, series: Mapping[str, Sequence[tuple[int, float]]], ylabel: str, title: str) -> Path:
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(7, 4))
    for name, points in series.items():
        axis.plot([x for x, _ in points], [y for _, y in points], marker=".", label=name)
    axis.set_xlabel("optimizer step")
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.legend()
    return _save(fig, path)


def reward_curve(path: Path, steps: Sequence[StepRecord], title: str) -> Path:
    """A training loop's mean reward per step (over the step's rollouts)."""
    rewards = [(record.step, record.reward_mean) for record in steps]
    return curves(path, {"train reward": rewards}, "mean reward of the step's rollouts", title)


def estimate_bars(path: Path, estimates: Mapping[str, tuple[float, float]], ylabel: str, title: str) -> Path:
    """``estimates``: label → (mean, error-bar half width)."""
    plt = _pyplot()
    names = list(estimates)
    fig, axis = plt.subplots(figsize=(max(6, 0.8 * len(names) + 2), 4))
    axis.bar(names, [estimates[n][0] for n in names], yerr=[estimates[n][1] for n in names], capsize=4)
    axis.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    return _save(fig, path)
