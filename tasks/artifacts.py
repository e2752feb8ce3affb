"""Prefect artifacts of a stage: the gate report, metric tables, links to plots, and progress of long loops.

Keys: ``stage-<n>-<stage>-<what>`` (lowercase, digits, dashes), so the latest gate report
of every stage has a stable address in the UI. Outside a flow or task run (a unit test calling ``.fn()``, a library
user) nothing is published and nothing fails: the run folder stays the record of truth.

    publish_markdown("4-overfit", "gate", report.markdown(), "overfit gate: passed")
    with ProgressArtifact("4-overfit", "training", total=steps) as progress:
        progress.advance("step 3: reward 0.61")
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from uuid import UUID

logger = logging.getLogger(__name__)
_KEY_JUNK = re.compile(r"[^a-z0-9-]+")


def artifact_key(stage_folder: str, what: str) -> str:
    """``stage-4-overfit-gate``: lowercase letters, digits and dashes only (Prefect's rule for keys)."""
    return _KEY_JUNK.sub("-", f"stage-{stage_folder}-{what}".lower()).strip("-")


def in_prefect_run() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def log(message: str, *args: object) -> None:
    """Log to the Prefect run's logger (shown in the UI and on the console) or, outside a run, this module's."""
    if in_prefect_run():
        from prefect.logging import get_run_logger

        get_run_logger().info(message, *args)
    else:
        logger.info(message, *args)


def warn(message: str, *args: object) -> None:
    """``log`` at warning level: something went wrong that does not stop the stage."""
    if in_prefect_run():
        from prefect.logging import get_run_logger

        get_run_logger().warning(message, *args)
    else:
        logger.warning(message, *args)


def publish_markdown(stage_folder: str, what: str, markdown: str, description: str = "") -> str | None:
    if not in_prefect_run():
        return None
    from prefect.artifacts import create_markdown_artifact

    key = artifact_key(stage_folder, what)
    create_markdown_artifact(markdown=markdown, key=key, description=description or None)
    return key


def publish_table(stage_folder: str, what: str, rows: Sequence[dict[str, Any]], description: str = "") -> str | None:
    if not in_prefect_run() or not rows:
        return None
    from prefect.artifacts import create_table_artifact

    key = artifact_key(stage_folder, what)
    create_table_artifact(table=[_jsonable(row) for row in rows], key=key, description=description or None)
    return key


def publish_files(stage_folder: str, run_root: Path, files: dict[str, Path]) -> str | None:
    """A markdown artifact with the stage's plots inline (PNG as data URIs, so the UI shows them without access to
    the run folder) and the path of every file in the run folder."""
    if not files:
        return None
    lines = [f"# Stage {stage_folder}: plots and files", "", f"Run folder: `{run_root.resolve()}`", ""]
    for name, path in files.items():
        lines.append(f"- **{name}**: `{path.resolve()}`")
    for name, path in files.items():
        if path.suffix == ".png" and path.is_file():
            data = base64.b64encode(path.read_bytes()).decode()
            lines += ["", f"## {name}", "", f"![{name}](data:image/png;base64,{data})"]
    return publish_markdown(stage_folder, "plots", "\n".join(lines) + "\n", "plots and files of the stage")


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (round(v, 6) if isinstance(v, float) else v if isinstance(v, int | str | bool) else str(v))
        for k, v in row.items()
    }


class ProgressArtifact:
    """A Prefect progress artifact for a loop of ``total`` items; also logs each advance (seen in any run)."""

    def __init__(self, stage_folder: str, what: str, total: int) -> None:
        self.key, self.total, self.done = artifact_key(stage_folder, what), max(total, 1), 0
        self._id: UUID | None = None

    def __enter__(self) -> ProgressArtifact:
        if in_prefect_run():
            from prefect.artifacts import create_progress_artifact

            self._id = create_progress_artifact(progress=0.0, key=self.key, description=f"0 / {self.total}")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def advance(self, note: str = "", by: int = 1, to: int | None = None) -> None:
        """Count ``by`` more items done, or ``to`` done in all (a resumed loop starts past its first step)."""
        self.done = min(self.done + by if to is None else to, self.total)
        log("%s %d/%d %s", self.key, self.done, self.total, note)
        if self._id is not None:
            from prefect.artifacts import update_progress_artifact

            percent = 100.0 * self.done / self.total
            update_progress_artifact(self._id, percent, description=f"{self.done} / {self.total} {note}".strip())
