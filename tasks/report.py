"""The run's trail and report, built from its structured records (``run.json``, manifests, the catalog).

* ``audit_lines`` — the audit trail as text: per stage the status, attempt, timings, fingerprint, config hash, code
  version, every gate criterion (measured, comparison, threshold, verdict), the findings and the artifact paths;
  config changes made on resume;
* ``write_report`` — ``report.md`` and a self-contained ``report.html`` (plots inlined): provenance, the stage
  table, the metric × stage table, each gate, the plots, and the evals in the catalog.

Both read the same records, so ``recipe audit`` and ``recipe report`` (and the Prefect artifacts, written from the
same gate reports) tell the same story.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.files import atomic_write_text
from tasks.catalog import Catalog
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


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _version(info: RunInfo | StageManifest) -> str:
    version = info.code_version
    if version is None or version.commit is None:
        return "unknown"
    return version.commit[:10] + ("+dirty" if version.dirty else "")


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
    for m in store.manifests():
        lines.append(
            f"{m.folder:<12} {m.status.value:<12} attempt {m.attempt}  {_fmt(m.duration_s)} s  "
            f"started {m.started_at or '–'}  fingerprint {m.fingerprint or '–'}  config {m.config_hash or '–'}  "
            f"code {_version(m)}"
        )
        if m.error:
            lines.append(f"    error: {m.error}")
        gate = m.gate or {}
        for c in gate.get("criteria", []):
            verdict = "pass" if c["passed"] else "FAIL"
            lines.append(
                f"    {verdict:<4} {c['name']}: {_fmt(c['measured'])} {c['op']} {_fmt(c['threshold'])}"
                + (f"  ({c['detail']})" if c.get("detail") else "")
            )
        lines += [f"    finding {subject}: {text}" for subject, text in map(_finding, gate.get("findings", []))]
        for name, path in gate.get("artifacts", {}).items():
            lines.append(f"    artifact {name}: {store.root / path}")
        for name, value in m.outputs.items():
            if isinstance(value, str) and (store.root / value).exists():
                lines.append(f"    output {name}: {store.root / value}")
    return lines


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        lines = ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
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
        rows.append([m.folder, m.status.value, _fmt(m.duration_s), str(m.attempt), ", ".join(failed) or "–"])
    return Table(["stage", "status", "seconds", "attempt", "failed criteria"], rows)


def _metric_table(manifests: list[StageManifest]) -> Table:
    present = [k for k in KEY_METRICS if any(k in m.metrics for m in manifests)]
    rows = [[key] + [_fmt(m.metrics.get(key)) if key in m.metrics else "" for m in manifests] for key in present]
    return Table(["metric", *[m.folder for m in manifests]], rows)


def _gate_table(m: StageManifest) -> Table:
    rows = [
        [
            c["name"],
            _fmt(c["measured"]),
            f"{c['op']} {_fmt(c['threshold'])}",
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
    return Table(header, [[_fmt(v) for v in row.values()] for row in rows])


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path


def write_report(store: RunStore, out: Path | None = None) -> ReportFiles:
    """``report.md`` and ``report.html`` for the run (default: in the run folder)."""
    out = out or store.root
    info, manifests = store.info(), store.manifests()
    catalog = Catalog(store.catalog_path)
    title = f"rl-recipe run {info.run_id}"
    provenance = (
        f"profile **{info.profile}**, config hash `{info.config_hash}`, code `{_version(info)}`, "
        f"created {info.created_at} on {info.host} (Python {info.python})"
    )
    md = [f"# {title}", "", provenance, "", "## Stages", "", _stage_table(manifests).markdown(), ""]
    page = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(provenance.replace('**', '').replace('`', ''))}</p>"]
    page += ["<h2>Stages</h2>", _stage_table(manifests).html()]
    metrics = _metric_table(manifests)
    md += ["## Metrics by stage", "", metrics.markdown(), ""]
    page += ["<h2>Metrics by stage</h2>", metrics.html()]
    evals = _eval_table(catalog)
    if evals.rows:
        md += ["## Evals", "", evals.markdown(), ""]
        page += ["<h2>Evals</h2>", evals.html()]
    for m in manifests:
        if not m.gate:
            continue
        gate = _gate_table(m)
        md += [f"## {m.folder}: {m.status.value}", "", gate.markdown(), ""]
        page += [f"<h2>{html.escape(m.folder)}: {html.escape(m.status.value)}</h2>", gate.html()]
        for subject, text in map(_finding, m.gate.get("findings", [])):
            md.append(f"- **{subject}**: {text}")
            page.append(f"<p><b>{html.escape(subject)}</b>: {html.escape(text)}</p>")
        for name, relative in m.gate.get("artifacts", {}).items():
            path = store.root / relative
            if path.suffix != ".png" or not path.is_file():
                continue
            md += ["", f"![{name}]({Path(relative).as_posix()})", ""]
            data = base64.b64encode(path.read_bytes()).decode()
            caption = html.escape(name)
            page.append(f'<figure><img alt="{caption}" src="data:image/png;base64,{data}"><figcaption>{caption}')
            page.append("</figcaption></figure>")
    files = ReportFiles(out / "report.md", out / "report.html")
    atomic_write_text(files.markdown, "\n".join(md) + "\n")
    head = f"<meta charset='utf-8'><title>{html.escape(title)}</title><style>{STYLE}</style>"
    atomic_write_text(files.html, f"<!doctype html><html><head>{head}</head><body>{''.join(page)}</body></html>\n")
    return files
