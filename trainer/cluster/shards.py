"""How a job on the cluster hands its records back: append-only shards in storage both sides reach.

A training job cannot write the run's catalog (DuckDB takes one writer, and the job may run on another node), so it
writes what the catalog would get — each step's record and the rollouts finished in that step — as small files under
its shard folder; the stage that follows the job reads them back into the catalog as they appear
(``tasks.cluster``), and once more at the end. Layout::

    <shards>/steps/000005.json            the StepRecord of step 5
    <shards>/rollouts/000005-0.jsonl      rollouts reported with step 5, one Trajectory per line (-1, -2: more
                                          reports of the same step, e.g. the rollouts finished after the last step)

Every file is written whole (temp file + rename). A step is the unit of change: a job resumed from its checkpoint
at step c re-runs steps c+1…, and the first shard it writes for a step replaces every shard the killed attempt had
written for it; the reader hands out a step again whenever its set of files changed, and the ingester replaces that
step's rows. So a catalog built from the shards holds each step once, whatever was killed and resumed. The reader
takes only names the writer makes: anything else in the folders (a ``notes.json``, a ``2-0.jsonl`` beside
``000002-0.jsonl``) is skipped with one warning, so it can neither stop the ingest nor count a step twice; a shard that
is not UTF-8 text is a one-line ``ShardError``.

    writer = ShardWriter(job_dir / "shards")
    writer.step(record); writer.rollouts(5, trajectories)
    for step in ShardReader(job_dir / "shards").changed():
        step.record, step.trajectories
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from envs.errors import RecipeError
from envs.files import atomic_write_text
from envs.types import Trajectory
from trainer.loops.history import StepRecord

STEPS, ROLLOUTS = "steps", "rollouts"
SHARD_NAMES = {STEPS: re.compile(r"\d{6}\.json"), ROLLOUTS: re.compile(r"\d{6}-\d{1,9}\.jsonl")}
"""The names ``ShardWriter`` gives its files: the only ones the reader takes."""

logger = logging.getLogger(__name__)


def _step_of(path: Path) -> int:
    return int(path.stem.split("-", 1)[0])


class ShardWriter:
    """The job's side: ``step`` and ``rollouts`` as ``LoopHooks`` callbacks write shard files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._parts: dict[int, int] = {}  # step -> rollout shards written for it by this process

    def _claim(self, step: int) -> None:
        """The first write of ``step`` by this process drops what an earlier (killed) attempt wrote for it."""
        if step in self._parts:
            return
        self._parts[step] = 0
        (self.root / STEPS / f"{step:06d}.json").unlink(missing_ok=True)
        for old in (self.root / ROLLOUTS).glob(f"{step:06d}-*.jsonl"):
            old.unlink()

    def step(self, record: StepRecord) -> None:
        self._claim(record.step)
        atomic_write_text(self.root / STEPS / f"{record.step:06d}.json", record.model_dump_json())

    def rollouts(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        self._claim(step)
        part = self._parts[step]
        self._parts[step] += 1
        text = "".join(t.model_dump_json() + "\n" for t in trajectories)
        atomic_write_text(self.root / ROLLOUTS / f"{step:06d}-{part}.jsonl", text)


@dataclass
class StepShards:
    """Everything the shards hold for one step (the record is None while only rollouts were written)."""

    step: int
    record: StepRecord | None = None
    trajectories: list[Trajectory] = field(default_factory=list)


class ShardReader:
    """The stage's side: ``changed`` returns the steps whose files changed since the last call, read whole."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._seen: dict[int, frozenset[tuple[str, int, int]]] = {}
        self._skipped: set[Path] = set()

    def _files(self) -> dict[int, list[Path]]:
        by_step: dict[int, list[Path]] = {}
        for folder, name in SHARD_NAMES.items():
            for path in (self.root / folder).glob("*"):
                if name.fullmatch(path.name):
                    by_step.setdefault(_step_of(path), []).append(path)
                elif not path.name.startswith(".") and path not in self._skipped:  # dot files: temp files in flight
                    self._skipped.add(path)
                    logger.warning("skipping %s: not a shard the job writes (%s/%s)", path, folder, name.pattern)
        return by_step

    def changed(self) -> list[StepShards]:
        """Steps (ascending) whose files were added, rewritten or removed since the last call."""
        found = []
        for step, paths in sorted(self._files().items()):
            try:
                signature = frozenset((p.name, (st := p.stat()).st_mtime_ns, st.st_size) for p in paths)
                if self._seen.get(step) == signature:
                    continue
                shards = _read(step, paths)
            except FileNotFoundError:  # replaced while we looked: the next call sees the new files
                continue
            self._seen[step] = signature
            found.append(shards)
        return found


class ShardError(RecipeError, ValueError):
    """A shard the flow cannot read; the message names the file and the first problem."""


def _read(step: int, paths: list[Path]) -> StepShards:
    shards = StepShards(step)
    for path in sorted(paths):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise ShardError(
                f"the job's shard {path} is not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
                f"{error.start}): it was not written by a job of this code, or was damaged on storage"
            ) from None
        try:
            if path.parent.name == STEPS:
                shards.record = StepRecord.model_validate(json.loads(text))
            else:
                shards.trajectories += [Trajectory.model_validate_json(line) for line in text.splitlines() if line]
        except ValueError as error:  # pydantic's ValidationError and json's JSONDecodeError are ValueErrors
            first = " ".join(str(error).split())[:300]
            raise ShardError(
                f"the job's shard {path} does not read as this code's records ({first}); a job runs the checkout as "
                "it was when it was submitted: was the code changed while the run was going?"
            ) from None
    return shards
