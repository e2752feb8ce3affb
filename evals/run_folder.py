"""An eval's output folder, which is also its resume log; ``spec.out_dir`` holds:

* ``spec.json`` — the spec and the resolved harness settings (``resolved_harness``); a rerun into the same folder
  must carry the same ones (the output folder aside);
* ``trials.jsonl`` — one ``TrialRecord`` per finished trial, appended, flushed and fsynced as each trial ends;
* ``trajectories.jsonl`` — the full trajectory of each finished trial (``{"pass_index", "attempts", "trajectory"}``);
* ``eval.json`` — ``EvalResult`` less its trials, written atomically when every trial is done.

A line cut short by a kill is dropped on reopening, and so is a trajectory whose trial record never landed: a trial
counts as finished once its ``trials.jsonl`` line is complete.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from pydantic import ValidationError

from envs.files import atomic_write_json, atomic_write_text
from envs.jsonio import json_line
from envs.types import Trajectory
from evals.errors import EvalConfigError, EvalFolderError
from evals.records import EvalResult, TrialRecord
from evals.resolved_harness import ResolvedHarness
from evals.spec import EvalSpec

TRIALS_FILE = "trials.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
SPEC_FILE = "spec.json"
RESULT_FILE = "eval.json"


def _append_line(handle: IO[str], obj: dict[str, Any]) -> None:
    handle.write(json_line(obj))
    handle.flush()
    os.fsync(handle.fileno())


def _complete_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of each newline-terminated line; a last line without newline was cut by a kill."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.endswith("\n") and line.strip():
                yield number, line


def read_trials(path: Path) -> list[TrialRecord]:
    """The finished trials in a ``trials.jsonl``; a bad complete line is an ``EvalFolderError`` naming file and line."""
    records = []
    for number, line in _complete_lines(path):
        try:
            records.append(TrialRecord.model_validate_json(line))
        except ValidationError as error:
            raise EvalFolderError(f"{path}, line {number}: not a trial record: {error}") from None
    return records


def read_trajectories(path: Path) -> Iterator[tuple[int, int, Trajectory]]:
    """(pass index, attempts, trajectory) of each complete line of a ``trajectories.jsonl``."""
    for number, line in _complete_lines(path):
        try:
            entry = json.loads(line)
            yield entry["pass_index"], entry["attempts"], Trajectory.model_validate(entry["trajectory"])
        except (ValueError, KeyError, TypeError) as error:
            raise EvalFolderError(f"{path}, line {number}: not a trajectory entry: {error}") from None


def _keep_finished(path: Path, keys: set[tuple[str, int]]) -> None:
    """Rewrite ``path`` (JSONL) keeping one line per finished trial: drops trajectories whose record never landed."""
    if not path.exists():
        return
    kept, seen = [], set()
    for _, line in _complete_lines(path):
        entry = json.loads(line)
        key = (entry["trajectory"]["task_id"], entry["pass_index"])
        if key in keys and key not in seen:
            seen.add(key)
            kept.append(line)
    atomic_write_text(path, "".join(kept))


def _truncate_to_complete(path: Path) -> None:
    """Cut a line left half-written by a kill, so the next append starts on a fresh line."""
    if path.exists():
        atomic_write_text(path, "".join(line for _, line in _complete_lines(path)))


def prepare_out_dir(spec: EvalSpec, harness: ResolvedHarness) -> list[TrialRecord]:
    """Check the folder holds this spec's run (or none) and return the trials it already finished."""
    out = spec.out_dir
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / SPEC_FILE
    # The resolved settings belong to the identity: a policy folder whose harness.json changed is another eval.
    identity = spec.identity() | {"resolved_harness": harness.settings.model_dump(mode="json")}
    if spec_path.exists():
        previous = json.loads(spec_path.read_text())
        if previous != identity:
            raise EvalConfigError(
                f"{out} holds an eval of a different spec or harness ({spec_path}); use another --out folder or "
                "delete it"
            )
    else:
        atomic_write_json(spec_path, identity)
    trials_path = out / TRIALS_FILE
    _truncate_to_complete(trials_path)
    finished = read_trials(trials_path)
    _keep_finished(out / TRAJECTORIES_FILE, {record.key for record in finished})
    return finished


class TrialLog:
    """The two append-only logs of a running eval, open for the run: ``with TrialLog(out) as log: log.append(...)``."""

    def __init__(self, out_dir: Path) -> None:
        self._out_dir = out_dir
        self._files = ExitStack()

    def __enter__(self) -> TrialLog:
        self._trials = self._files.enter_context((self._out_dir / TRIALS_FILE).open("a", encoding="utf-8"))
        self._trajectories = self._files.enter_context((self._out_dir / TRAJECTORIES_FILE).open("a", encoding="utf-8"))
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._files.close()

    def append(self, record: TrialRecord, trajectory: Trajectory) -> None:
        # The trajectory first: a trial counts as finished only once its record line has landed.
        entry = {"pass_index": record.pass_index, "attempts": record.attempts}
        _append_line(self._trajectories, entry | {"trajectory": trajectory.model_dump(mode="json")})
        _append_line(self._trials, record.model_dump(mode="json"))


def write_result(result: EvalResult) -> None:
    atomic_write_text(result.spec.out_dir / RESULT_FILE, result.model_dump_json(indent=2))


def load_eval(out_dir: Path) -> EvalResult:
    """A finished eval from its folder: ``eval.json`` plus the trials of ``trials.jsonl``."""
    path = out_dir / RESULT_FILE
    if not path.is_file():
        raise EvalFolderError(f"{out_dir} holds no {RESULT_FILE}: the eval did not finish (rerun it to resume)")
    result = EvalResult.model_validate_json(path.read_text())
    return result.model_copy(update={"trials": sorted(read_trials(out_dir / TRIALS_FILE), key=lambda r: r.key)})
