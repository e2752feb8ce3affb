"""TensorBoard: event files in the run folder (``tracking/tensorboard``; ``tensorboard --logdir`` shows them).

Each stage's points are scalars at their steps (TensorBoard groups them by the key's first part: the stage); a table
is a markdown text (TensorBoard has no table type), its conversations cut to keep the text readable. A later process
(a resumed run) writes another event file in the same folder, which TensorBoard reads as the same run.
"""

from __future__ import annotations

from typing import Any, ClassVar

from tasks.tracking.contract import Publication, Table, TrackerName, TrackerRun, TrackingSettings

CELL_CHARS = 2000


class TensorBoardTracker:
    name: ClassVar[TrackerName] = TrackerName.TENSORBOARD

    def __init__(self, settings: TrackingSettings) -> None:
        self.settings = settings
        self.writer: Any = None
        self.logdir = ""

    @staticmethod
    def describe(settings: TrackingSettings) -> str:
        return "event files in <run>/tracking/tensorboard"

    def start(self, run: TrackerRun, tracker_id: str | None) -> str:
        from torch.utils.tensorboard import SummaryWriter

        logdir = run.folder / "tensorboard"
        self.writer, self.logdir = SummaryWriter(log_dir=str(logdir)), str(logdir)
        if tracker_id is None:
            self.writer.add_text("run", "\n".join(f"- **{k}**: {v}" for k, v in run.tags.items()), 0)
        return tracker_id or run.run_id

    def publish(self, publication: Publication) -> None:
        for point in publication.points:
            self.writer.add_scalar(point.key, point.value, point.step)
        for table in publication.tables:
            self.writer.add_text(table.key, markdown_table(table), 0)
        self.writer.add_text(f"{publication.stage}/gate", publication.summary, 0)
        self.writer.flush()

    def finish(self, passed: bool) -> None:
        self.writer.add_text("pipeline", "passed" if passed else "failed", 0)

    def link(self) -> str:
        return f"tensorboard --logdir {self.logdir}"

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def markdown_table(table: Table) -> str:
    def cell(value: Any) -> str:
        text = str(value).replace("|", "\\|").replace("\n", "<br>")
        return text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + " …"

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.rows]
    return "\n".join(lines)
