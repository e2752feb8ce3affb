"""An eval's output folder, which is also its resume log; ``spec.out_dir`` holds:

* ``spec.json`` — the spec and the resolved harness settings (``resolved_harness``); a rerun into the same folder
  must carry the same ones (the output folder aside);
* ``trials.jsonl`` — one ``TrialRecord`` per finished trial, appended, flushed and fsynced as each trial ends;
* ``trajectories.jsonl`` — the full trajectory of each finished trial (``{"pass_index", "attempts", "trajectory"}``);
* ``eval.json`` — ``EvalResult`` less its trials, written atomically when every trial is done.

A line cut short by a kill is dropped on reopening, and so is a trajectory whose trial record never landed: a trial
counts as finished once its ``trials.jsonl`` line is complete.

A pipeline stage's eval folder also holds ``tasks.jsonl``, the task set it evaluated. ``RecordedEval`` reads any eval
folder's ``spec.json`` back and ``rerun`` makes the spec that runs the same eval again against another engine: what
``recipe eval run --run RUN --stage STAGE`` does. ``default_out_dir`` names the folder of an eval given none.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from pydantic import ValidationError

from envs.files import atomic_write_json, atomic_write_text
from envs.harness.policy import PolicyHarness
from envs.jsonio import JsonError, json_line, parse_json
from envs.types import Trajectory
from evals.errors import EvalConfigError, EvalFolderError
from evals.records import EvalResult, TrialRecord
from evals.resolved_harness import ResolvedHarness, resolve_harness
from evals.sources import SourceKind
from evals.spec import SEEDING, EngineSpec, EvalSpec, JudgeSpec

TRIALS_FILE = "trials.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
SPEC_FILE = "spec.json"
RESULT_FILE = "eval.json"
TASKS_FILE = "tasks.jsonl"
EVALS_DIR = Path("runs") / "evals"
"""Where evals given no output folder write, under the current directory."""
CONTENT_ADDRESSED = ("data", "models")
"""Checkout folders whose subfolders are named by a digest of their content (``data/env-<digest>``,
``models/base/<digest>``): the same name holds the same content in any checkout that built it."""


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


def default_out_dir(spec: EvalSpec, name: str) -> Path:
    """``./runs/evals/<name>-<key>``, ``key`` a digest of what the eval runs (``EvalSpec.identity``): the same
    command finds its folder again and resumes it, while an eval of other tasks, settings or model gets a folder of
    its own instead of colliding with an earlier one."""
    key = hashlib.sha256(json.dumps(spec.identity(), sort_keys=True).encode()).hexdigest()[:8]
    return Path.cwd() / EVALS_DIR / f"{name}-{key}"


@dataclass(frozen=True)
class RecordedEval:
    """An eval folder's ``spec.json``: the spec that ran less what does not change its trials (where it wrote, where
    the engine listened, the judge's address), and the harness settings it resolved to."""

    folder: Path
    recorded: dict[str, Any]

    @classmethod
    def read(cls, folder: Path) -> RecordedEval:
        """The record in ``folder``; a folder without one, or a damaged one, is an ``EvalFolderError``."""
        path = folder / SPEC_FILE
        try:
            recorded = parse_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise EvalFolderError(f"{folder} is not an eval folder: it holds no {SPEC_FILE}") from None
        except (OSError, JsonError, UnicodeDecodeError) as error:
            raise EvalFolderError(f"cannot read {path}: {error}") from None
        if not isinstance(recorded, dict) or not {"tasks", "engine", "resolved_harness"} <= recorded.keys():
            raise EvalFolderError(f"{path} is not an eval's spec (no tasks, engine or resolved_harness)")
        return cls(folder, recorded)

    @property
    def policy(self) -> str | None:
        """The policy folder that was evaluated: the one whose harness.json set the harness, else the tokenizer's."""
        return self.recorded.get("policy") or self.recorded["engine"].get("tokenizer")

    def rerun(
        self,
        engine: EngineSpec,
        out_dir: Path,
        concurrency: int,
        judge: JudgeSpec | None = None,
        worlds: Path | None = None,
        policy: Path | None = None,
        run_root: Path | None = None,
    ) -> EvalSpec:
        """The same eval — tasks (the folder's own ``tasks.jsonl`` when it holds one, so a moved run folder still
        works), harness settings, passes and seeds — against ``engine`` (with the recorded tokenizer unless it names
        one), into ``out_dir``. ``judge`` and ``worlds`` stand in for what the record does not keep or what moved,
        ``policy`` for the policy folder whose harness.json is read. Recorded paths that are not where the record
        says are looked for where a moved run keeps them (``found_here``: inside ``run_root``, the run's folder now,
        or in this checkout's content-addressed folders). Raises ``EvalConfigError`` when the record cannot be run
        the same way: another seeding scheme, a recorded folder found nowhere, or harness settings that resolve
        differently now (a harness.json edited since)."""
        if self.recorded.get("seeding") != SEEDING:
            raise EvalConfigError(
                f"{self.folder} sampled with seeding {self.recorded.get('seeding')!r}, not {SEEDING!r}: its trials "
                "cannot be drawn again by this version"
            )
        tasks = dict(self.recorded["tasks"])
        if tasks["kind"] == SourceKind.JSONL and (self.folder / TASKS_FILE).is_file():
            tasks["path"] = str(self.folder / TASKS_FILE)
        here = functools.partial(found_here, run_root=run_root)
        tasks["worlds"] = str(worlds) if worlds is not None else here(tasks.get("worlds"), "worlds", "--worlds")
        if engine.tokenizer is None:
            tokenizer = here(self.recorded["engine"].get("tokenizer"), "tokenizer", "--tokenizer")
            engine = engine.model_copy(update={"tokenizer": tokenizer})
        policy_now = policy if policy is not None else here(self.recorded.get("policy"), "policy", "--policy")
        fields = {k: v for k, v in self.recorded.items() if k not in ("seeding", "resolved_harness", "judge")}
        spec = EvalSpec.model_validate(
            fields
            | {"tasks": tasks, "engine": engine, "out_dir": out_dir, "concurrency": concurrency, "judge": judge}
            | {"policy": policy_now}
        )
        self._check_harness(resolve_harness(spec).settings)
        return spec

    def _check_harness(self, settings: PolicyHarness) -> None:
        """The harness resolves to the recorded settings, so the rerun samples as the eval did; else say what moved."""
        then = PolicyHarness.model_validate(self.recorded["resolved_harness"])
        if settings == then:
            return
        now_fields, then_fields = settings.harness.model_dump(mode="json"), then.harness.model_dump(mode="json")
        changed = [k for k, v in then_fields.items() if now_fields.get(k) != v]
        changed += ["apps"] if settings.apps != then.apps else []
        raise EvalConfigError(
            f"the harness settings now differ from those the eval in {self.folder} ran with ({', '.join(changed)}); "
            "pass --policy with the policy folder it evaluated"
        )


def found_here(recorded: str | None, what: str, flag: str, run_root: Path | None = None) -> str | None:
    """Where a path an eval recorded is now: as recorded; else, for a run folder copied or moved (another checkout,
    another machine), inside ``run_root`` (the part after the run's id: its checkpoints) or in this checkout's
    content-addressed folders (the part from ``data/`` or ``models/`` on). A recorded name no rule applies to (a hub
    id) is kept. ``EvalConfigError`` names every place looked when a path is found nowhere."""
    if recorded is None or Path(recorded).exists():
        return recorded
    parts = Path(recorded).parts
    places = []
    if run_root is not None and run_root.name in parts:
        after = len(parts) - parts[::-1].index(run_root.name)
        places.append(run_root.joinpath(*parts[after:]))
    home = next((i for i in reversed(range(len(parts))) if parts[i] in CONTENT_ADDRESSED), None)
    if home is not None:
        places.append(Path.cwd().joinpath(*parts[home:]))
    if not places and not Path(recorded).is_absolute():
        return recorded
    for place in places:
        if place.exists():
            return str(place)
    looked = ", ".join(str(p) for p in [Path(recorded), *places])
    rebuild = (
        " (a content-addressed folder: running the run's profile once in this checkout builds the same one)"
        if home is not None
        else ""
    )
    raise EvalConfigError(f"the eval's {what} is in none of {looked}{rebuild}; or pass {flag} PATH")
