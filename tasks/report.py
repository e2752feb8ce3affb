"""The run's trail and report, built from its structured records (``run.json``, manifests, the catalog).

* ``audit_lines`` — the audit trail as text: per stage the status, attempt, timings, fingerprint, config hash, code
  version, every gate criterion (measured, comparison, threshold, verdict), the findings and the artifact paths;
  config changes made on resume; checkpoints removed by ``recipe prune`` (``tasks.prune``);
* ``write_report`` — ``report.md`` and a self-contained ``report.html`` (plots inlined): provenance, the stage
  table, the metric × stage table, each gate, the plots, the evals in the catalog, and the overfit gate over the
  profile's runs (``tasks.history``) with this run marked;
* ``Table`` and ``Page`` — the pieces both are made of (``tasks.explorer.comparison`` builds its two-run page
  from them).

Both read the same records, so ``recipe audit`` and ``recipe report`` (and the Prefect artifacts, written from the
same gate reports) tell the same story.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.files import atomic_write_text
from tasks.catalog import Catalog
from tasks.history import OverfitNight, failure_streak, overfit_history
from tasks.prune import PRUNED_FILE, prune_log
from tasks.run_store import RunInfo, RunStore, StageManifest

KEY_METRICS = (
    "oracle_solved",
    "base_infra_rate",
    "tasks_with_variance",
    "misalignments",
    "drift_rate",
    "logprob_mismatch",
    "chosen_tokens_per_s",
    "reward_before",
    "reward_after",
    "p_value",
    "landed",
    "base_pass_at_1",
    "trained_pass_at_1",
    "ci_low",
    "ci_high",
)
"""Metrics shown in the metric × stage table (the rest stay in each stage's manifest)."""
STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 6px}img{max-width:100%}"
)


def fmt(value: Any) -> str:
    """A value as a table cell: 4 significant digits for a float (a negated zero bar, −0.0, prints as 0), ``–`` for
    none."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value + 0.0:.4g}"  # -0.0 + 0.0 == +0.0
    return str(value)


def _version(info: RunInfo | StageManifest) -> str:
    return info.code_version.label if info.code_version is not None else "unknown"


def _finding(finding: Any) -> tuple[str, str]:
    """A gate finding as (subject, "problem → advice"). The manifest holds it as plain JSON (any version may have
    written it, or a person), so one that lacks a key or is not a mapping is shown with the fields it has rather than
    failing the audit or the report."""
    if not isinstance(finding, dict):
        return "?", str(finding)
    subject = str(finding.get("subject", "?"))
    if "problem" in finding and "advice" in finding:
        return subject, f"{finding['problem']} → {finding['advice']}"
    return subject, ", ".join(f"{key}: {value}" for key, value in finding.items() if key != "subject")


def audit_lines(store: RunStore) -> list[str]:
    """The audit trail of a run, one line per fact."""
    info = store.info()
    lines = [
        f"run {info.run_id}  profile {info.profile}  created {info.created_at}  host {info.host}",
        f"config hash {info.config_hash}  code {_version(info)}  folder {store.root.resolve()}",
    ]
    lines += [f"  config changed {c.at}: {c.reason} → {c.config_hash}" for c in info.history]
    lines += [
        f"  pruned {p.at}: {len(p.removed)} checkpoint folder(s), {p.freed} bytes, removed on purpose by recipe prune "
        f"--keep-last {p.keep_last} (each listed in {store.root / PRUNED_FILE})"
        for p in prune_log(store).prunes
    ]
    for m in store.manifests():
        lines.append(
            f"{m.folder:<12} {m.status.value:<12} attempt {m.attempt}  {fmt(m.duration_s)} s  "
            f"started {m.started_at or '–'}  fingerprint {m.fingerprint or '–'}  config {m.config_hash or '–'}  "
            f"code {_version(m)}"
        )
        if m.error:
            lines.append(f"    error: {m.error}")
        gate = m.gate or {}
        for c in gate.get("criteria", []):
            verdict = "pass" if c["passed"] else "FAIL"
            lines.append(
                f"    {verdict:<4} {c['name']}: {fmt(c['measured'])} {c['op']} {fmt(c['threshold'])}"
                + (f"  ({c['detail']})" if c.get("detail") else "")
            )
        lines += [f"    finding {subject}: {text}" for subject, text in map(_finding, gate.get("findings", []))]
        for name, path in gate.get("artifacts", {}).items():
            lines.append(f"    artifact {name}: {store.root / path}")
        for name, value in m.outputs.items():
            found = _output_path(store, value)
            if found is not None:
                base = " (the base policy: recipe eval … --model it)" if (m.stage, name) == ("derisk", "policy") else ""
                lines.append(f"    output {name}: {found}{base}")
    return lines


def _output_path(store: RunStore, value: object) -> Path | None:
    """A stage output that names a file or folder: inside the run (recorded relative to it) or elsewhere (the base
    policy, the environment build: absolute, or relative to the checkout the run was made in)."""
    if not isinstance(value, str) or not value:
        return None
    for candidate in (store.root / value, Path(value), store.root.resolve().parent.parent / value):
        if candidate.exists():
            return candidate.resolve() if candidate != store.root / value else candidate
    return None


def _cells(row: list[str]) -> list[str]:
    return [cell.replace("|", "\\|") for cell in row]


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        """The table in markdown; a ``|`` in a cell (``mean |Δ logprob|``) is escaped, not a column break."""
        lines = ["| " + " | ".join(_cells(self.header)) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(_cells(row)) + " |" for row in self.rows]
        return "\n".join(lines)

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in self.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _stage_table(manifests: list[StageManifest]) -> Table:
    rows = []
    for m in manifests:
        gate = m.gate or {}
        failed = [c["name"] for c in gate.get("criteria", []) if not c["passed"]]
        rows.append([m.folder, m.status.value, fmt(m.duration_s), str(m.attempt), ", ".join(failed) or "–"])
    return Table(["stage", "status", "seconds", "attempt", "failed criteria"], rows)


def _metric_table(manifests: list[StageManifest]) -> Table:
    present = [k for k in KEY_METRICS if any(k in m.metrics for m in manifests)]
    rows = [[key] + [fmt(m.metrics.get(key)) if key in m.metrics else "" for m in manifests] for key in present]
    return Table(["metric", *[m.folder for m in manifests]], rows)


def _gate_table(m: StageManifest) -> Table:
    rows = [
        [
            c["name"],
            fmt(c["measured"]),
            f"{c['op']} {fmt(c['threshold'])}",
            "pass" if c["passed"] else "FAIL",
            c.get("detail", ""),
        ]
        for c in (m.gate or {}).get("criteria", [])
    ]
    return Table(["criterion", "measured", "needs", "verdict", "detail"], rows)


def _eval_table(catalog: Catalog) -> Table:
    rows = catalog.query(
        """SELECT stage, suite, policy, count(DISTINCT task_id) AS tasks, count(DISTINCT pass_index) AS passes,
                  avg(passed::INT) AS pass_at_1, avg(reward) AS mean_reward
           FROM evals GROUP BY stage, suite, policy ORDER BY min(rowid)"""
    )
    header = ["stage", "suite", "policy", "tasks", "passes", "Pass@1", "mean reward"]
    return Table(header, [[fmt(v) for v in row.values()] for row in rows])


def history_table(nights: list[OverfitNight], this_run: str | None = None) -> Table:
    """The overfit gate over runs, oldest first; ``this_run`` is marked (the run a report is about)."""
    rows = [
        [
            n.run_id + (" (this run)" if n.run_id == this_run else ""),
            n.created_at,
            n.code.label,
            n.status.value,
            f"{fmt(n.reward_before)} → {fmt(n.reward_after)}",
            fmt(n.gain),
            fmt(n.p_value),
            ", ".join(n.failed_criteria) or (n.note or "–"),
        ]
        for n in nights
    ]
    return Table(["run", "created", "code", "overfit", "reward", "gain", "p", "failed / why"], rows)


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path


@dataclass
class Page:
    """A report written twice from the same calls: markdown (read in a terminal or on a forge) and one self-contained
    HTML file (plots inlined), so the two never tell different stories."""

    title: str
    md: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.md += [f"# {self.title}", ""]
        self.body.append(f"<h1>{html.escape(self.title)}</h1>")

    def text(self, markdown: str) -> None:
        """A paragraph; the HTML drops the markdown's ``**`` and backticks."""
        self.md += [markdown, ""]
        self.body.append(f"<p>{html.escape(markdown.replace('**', '').replace('`', ''))}</p>")

    def section(self, heading: str, table: Table | None = None) -> None:
        self.md += [f"## {heading}", ""]
        self.body.append(f"<h2>{html.escape(heading)}</h2>")
        if table is not None:
            self.md += [table.markdown(), ""]
            self.body.append(table.html())

    def item(self, subject: str, text: str) -> None:
        self.md.append(f"- **{subject}**: {text}")
        self.body.append(f"<p><b>{html.escape(subject)}</b>: {html.escape(text)}</p>")

    def figure(self, name: str, path: Path, link: str) -> None:
        """The PNG at ``path``: linked as ``link`` (relative to the markdown file) in the markdown, inlined in the
        HTML."""
        self.md += ["", f"![{name}]({link})", ""]
        data = base64.b64encode(path.read_bytes()).decode()
        caption = html.escape(name)
        self.body.append(f'<figure><img alt="{caption}" src="data:image/png;base64,{data}"><figcaption>{caption}')
        self.body.append("</figcaption></figure>")

    def write(self, out: Path, name: str) -> ReportFiles:
        """``<out>/<name>.md`` and ``<out>/<name>.html``, each written atomically."""
        files = ReportFiles(out / f"{name}.md", out / f"{name}.html")
        atomic_write_text(files.markdown, "\n".join(self.md) + "\n")
        head = f"<meta charset='utf-8'><title>{html.escape(self.title)}</title><style>{STYLE}</style>"
        page = f"<!doctype html><html><head>{head}</head><body>{''.join(self.body)}</body></html>\n"
        atomic_write_text(files.html, page)
        return files


def write_report(store: RunStore, out: Path | None = None) -> ReportFiles:
    """``report.md`` and ``report.html`` for the run (default: in the run folder). The overfit gate over the profile's
    runs comes from the run folders beside this one (``tasks.history``)."""
    info, manifests = store.info(), store.manifests()
    page = Page(f"rl-recipe run {info.run_id}")
    page.text(
        f"profile **{info.profile}**, config hash `{info.config_hash}`, code `{_version(info)}`, "
        f"created {info.created_at} on {info.host} (Python {info.python})"
    )
    page.section("Stages", _stage_table(manifests))
    page.section("Metrics by stage", _metric_table(manifests))
    evals = _eval_table(Catalog(store.catalog_path))
    if evals.rows:
        page.section("Evals", evals)
    for m in manifests:
        if not m.gate:
            continue
        page.section(f"{m.folder}: {m.status.value}", _gate_table(m))
        for subject, text in map(_finding, m.gate.get("findings", [])):
            page.item(subject, text)
        for name, relative in m.gate.get("artifacts", {}).items():
            path = store.root / relative
            if path.suffix == ".png" and path.is_file():
                page.figure(name, path, Path(relative).as_posix())
    nights = overfit_history(store.root.parent, info.profile)
    if nights:
        page.section(f"The overfit gate over the runs of {info.profile}", history_table(nights, info.run_id))
        for line in failure_streak(nights).lines():
            page.text(line)
    return page.write(out or store.root, "report")
