"""APEX-Agents, as its authors ship and grade it: task rows, the release folder, its worlds, and its licence.

* ``load_apex(path)`` — APEX-Agents rows (a JSON list or JSONL): ``task_id, world_id, domain, prompt,
  rubric[{verifier_id, criteria}], task_input_files, expected_output, expected_file_type, gold_response``; every
  rubric item becomes an ``llm_judge`` criterion, the other columns go to ``metadata``.
* ``load_apex_release(root)`` — a release folder::

      tasks_and_rubrics.json           the rows
      world_descriptions.json          [{world_id, world_name?, description?, ...}] (optional)
      world_files_zipped/<world_id>.zip  the world: filesystem/ and .apps_data/ (other entries are files)
      task_files/<task_id>/            files of one task, overlaid on a copy of its world (optional)

  A task with task files gets a world of its own, ``<world_id>.<task_id>``; the others share their world.
* ``materialize_worlds(root, tasks, worlds)`` — unzips each world the tasks use into ``worlds/<world id>/`` (our
  layout: ``filesystem/`` and ``apps_data/``), overlays task files, and skips a world already built from the same
  inputs. A release comes from elsewhere: a zip whose entries would unzip past ``MAX_ENTRY_BYTES`` each or
  ``MAX_WORLD_BYTES`` in all, or one compressed more than ``MAX_RATIO`` times (a zip bomb), is refused before anything
  is written; so are links (in a zip, in task files, or a symlinked task files folder).

APEX's grading rules travel with each task: a task whose ``expected_output`` is a file (anything but
``message_in_console``) carries ``envs.graders.REQUIRED_OUTPUTS`` — the suffixes read from ``expected_file_type`` —
so a rollout that wrote no such file fails every judged criterion without a judge call. APEX is licensed for
evaluation only: each task carries ``EVALUATION_ONLY`` with the reason, and ``refuse_evaluation_only`` is what the
trainer calls on every task set it is given.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.errors import RecipeError
from envs.files import atomic_write_text, staged_dir
from envs.graders import REQUIRED_OUTPUTS
from envs.jsonio import JsonError, parse_json
from envs.loaders import TaskLoadError, _json_lines, _problems, _read_text, _unique
from envs.types import Domain, LlmJudge, Split, TaskSpec

EVALUATION_ONLY = "evaluation_only"
"""``TaskSpec.metadata`` key: why the task may be evaluated on but never trained on."""
APEX_LICENCE = (
    "APEX-Agents is licensed for model evaluation only: its terms forbid training, fine-tuning or parameter fitting "
    "on it"
)
TASKS_FILE = "tasks_and_rubrics.json"
WORLD_DESCRIPTIONS_FILE = "world_descriptions.json"
WORLD_ZIPS = "world_files_zipped"
TASK_FILES = "task_files"
CONSOLE_OUTPUT = "message_in_console"
_STAMP = ".apex-world.json"  # at the world root: outside filesystem/ and apps_data/, so never in a diff
# A zip's top-level folders that map onto our world's; any other entry is a file of filesystem/.
_ROOT_MAP = {"filesystem": "filesystem", ".apps_data": "apps_data", "apps_data": "apps_data"}
# What a world zip may unzip to. zipfile never writes more than an entry's declared size (it stops there and the CRC
# check fails), so checking the declared sizes before unzipping bounds what reaches the disk.
MAX_ENTRY_BYTES = 512 << 20
MAX_WORLD_BYTES = 2 << 30
MAX_RATIO = 100  # uncompressed / compressed of one entry; office files and text stay far below it
_RATIO_FLOOR_BYTES = 1 << 20  # a smaller entry may compress further (a blank template): it cannot fill a disk


class EvaluationOnlyTaskError(RecipeError, ValueError):
    """Tasks whose licence forbids training on them were handed to a trainer."""


def refuse_evaluation_only(tasks: Sequence[TaskSpec]) -> None:
    """Raise ``EvaluationOnlyTaskError`` naming the tasks (and why) when any is marked ``EVALUATION_ONLY``."""
    refused = {task.task_id: task.metadata[EVALUATION_ONLY] for task in tasks if task.metadata.get(EVALUATION_ONLY)}
    if refused:
        ids = sorted(refused)
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        reasons = "; ".join(sorted(set(refused.values())))
        raise EvaluationOnlyTaskError(
            f"refusing to train on {len(ids)} evaluation-only task(s) ({shown}): {reasons}. Evaluate them with "
            "`recipe eval run --tasks apex:DIR` instead, and train on other tasks"
        )


# --- rows ------------------------------------------------------------------------------------------------------------

_APEX_DOMAINS = {
    "investment banking": Domain.INVESTMENT_BANKING,
    "management consulting": Domain.MANAGEMENT_CONSULTING,
    "law": Domain.CORPORATE_LAW,
    "corporate law": Domain.CORPORATE_LAW,
}


def apex_domain(name: str) -> Domain:
    """APEX job names ("Investment Banking", "Management Consulting", "Law" / "Corporate Law") or our own values."""
    key = " ".join(name.casefold().replace("_", " ").replace("-", " ").split())
    domains = {**{str(domain).replace("_", " "): domain for domain in Domain}, **_APEX_DOMAINS}
    if key not in domains:
        known = ", ".join(sorted({*(name.title() for name in _APEX_DOMAINS), *(str(d) for d in Domain)}))
        raise ValueError(f"unknown domain {name!r}; known: {known}")
    return domains[key]


class _ApexCriterion(BaseModel):
    model_config = ConfigDict(extra="allow")

    criteria: str = Field(min_length=1)
    verifier_id: str | None = None


class _ApexRow(BaseModel):
    # Rows carry more columns than we use (task_name, gold_response_type, ...): they are kept in metadata.
    model_config = ConfigDict(extra="allow")

    task_id: str = Field(min_length=1)
    world_id: str = Field(min_length=1)
    domain: str
    prompt: str = Field(min_length=1)
    rubric: list[_ApexCriterion] = Field(min_length=1)
    task_input_files: list[str] | str | None = None
    expected_output: list[str] | str | None = None
    expected_file_type: str | None = None
    gold_response: str | None = None


class _FieldError(ValueError):
    """A row field whose value passed type checks but not a later rule (an unknown domain)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field


def _as_list(value: list[str] | str | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    return list(value)


def required_outputs(expected_output: list[str] | str | None, expected_file_type: str | None) -> list[str] | None:
    """The file suffixes a task's output must have (``[]``: any file), or None for an answer-only task.

    ``expected_file_type`` is free text such as ``"Spreadsheets (.xlsx, .xls)"``: every ``.suffix`` in it counts.
    """
    outputs = [value for value in _as_list(expected_output) if value != CONSOLE_OUTPUT]
    if not outputs:
        return None
    return sorted({suffix.casefold() for suffix in re.findall(r"\.[A-Za-z0-9]+\b", expected_file_type or "")})


def _apex_task(row: Any) -> TaskSpec:
    parsed = _ApexRow.model_validate(row)
    try:
        domain = apex_domain(parsed.domain)
    except ValueError as exc:
        raise _FieldError("domain", str(exc)) from None
    required = required_outputs(parsed.expected_output, parsed.expected_file_type)
    return TaskSpec(
        task_id=parsed.task_id,
        world_id=parsed.world_id,
        domain=domain,
        split=Split.HELDOUT,
        prompt=parsed.prompt,
        rubric=[LlmJudge(criteria=item.criteria, verifier_id=item.verifier_id) for item in parsed.rubric],
        input_files=_as_list(parsed.task_input_files),
        expected_outputs=_as_list(parsed.expected_output),
        metadata={
            "source": "apex",
            "apex_domain": parsed.domain,
            "gold_response": parsed.gold_response,
            "expected_file_type": parsed.expected_file_type,
            EVALUATION_ONLY: APEX_LICENCE,
            **({REQUIRED_OUTPUTS: required} if required is not None else {}),
            **(parsed.model_extra or {}),
        },
    )


def load_apex(path: Path) -> list[TaskSpec]:
    """APEX-Agents rows from a JSON list (``row N``, 1-based) or JSONL (``line N``)."""
    text = _read_text(path)
    if text.lstrip().startswith("["):
        try:
            rows = parse_json(text)
        except JsonError as exc:
            raise TaskLoadError(path, [(None, f"invalid JSON: {exc}")]) from None
        numbered = [(f"row {number}", row) for number, row in enumerate(rows, start=1)]
    else:
        numbered = _json_lines(path)
    tasks = []
    for where, row in numbered:
        try:
            tasks.append((where, _apex_task(row)))
        except ValidationError as exc:
            raise TaskLoadError(path, _problems(exc), where) from None
        except _FieldError as exc:
            raise TaskLoadError(path, [(exc.field, str(exc))], where) from None
    return _unique(tasks, path)


# --- the release folder ----------------------------------------------------------------------------------------------


def _world_descriptions(root: Path) -> dict[str, dict[str, Any]]:
    """``world_id`` → its description row; the file is optional (a list of rows or a ``{world_id: row}`` object)."""
    path = root / WORLD_DESCRIPTIONS_FILE
    if not path.is_file():
        return {}
    try:
        data = parse_json(_read_text(path))
    except JsonError as exc:
        raise TaskLoadError(path, [(None, f"invalid JSON: {exc}")]) from None
    for key, value in data.items() if isinstance(data, dict) else ():
        if not isinstance(value, dict):
            reason = f"must be an object (world_name, description, ...), not {value!r:.80}"
            raise TaskLoadError(path, [(None, reason)], f"entry {key!r}")
    rows = [{"world_id": key, **value} for key, value in data.items()] if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(row, dict) and "world_id" in row for row in rows):
        raise TaskLoadError(path, [(None, "must be a list of objects with a world_id (or an object keyed by it)")])
    return {str(row["world_id"]): row for row in rows}


def _task_files(root: Path, task_id: str) -> Path | None:
    """``task_files/<task_id>`` when it holds files; refused when it is (or lies under) a symlink, which would overlay
    a host folder on the world."""
    relative = f"{TASK_FILES}/{task_id}"
    folder = root / relative
    if folder.exists() and folder.resolve() != root.resolve() / relative:
        raise TaskLoadError(root, [(relative, "is a symbolic link (or lies under one): task files must be a folder")])
    return folder if folder.is_dir() and any(folder.iterdir()) else None


def apex_world_zip(root: Path, task: TaskSpec) -> Path:
    return root / WORLD_ZIPS / f"{task.metadata['apex_world_id']}.zip"


def load_apex_release(root: Path) -> list[TaskSpec]:
    """The tasks of an APEX-Agents release folder (module docstring), each naming the world it runs in."""
    if not root.is_dir():
        raise TaskLoadError(root, [(None, "is not a folder")])
    if not (root / TASKS_FILE).is_file():
        raise TaskLoadError(root, [(TASKS_FILE, "is missing (not an APEX-Agents release folder?)")])
    descriptions = _world_descriptions(root)
    tasks = []
    for task in load_apex(root / TASKS_FILE):
        zipped = root / WORLD_ZIPS / f"{task.world_id}.zip"
        if not zipped.is_file():
            raise TaskLoadError(root, [(f"{WORLD_ZIPS}/{task.world_id}.zip", f"is missing (task {task.task_id})")])
        own_world = _task_files(root, task.task_id) is not None
        world = descriptions.get(task.world_id, {})
        metadata = task.metadata | {"apex_world_id": task.world_id, "world_description": world.get("description")}
        world_id = f"{task.world_id}.{task.task_id}" if own_world else task.world_id
        tasks.append(task.model_copy(update={"world_id": world_id, "metadata": metadata}))
    return tasks


# --- worlds ----------------------------------------------------------------------------------------------------------


def _world_path(name: str, source: Path) -> PurePosixPath:
    """Where an archive or task-file entry lands in our world (``filesystem/...`` or ``apps_data/...``)."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name:
        raise TaskLoadError(source, [(None, f"entry {name!r} would leave the world folder")])
    parts = path.parts
    if parts and parts[0] in _ROOT_MAP:
        return PurePosixPath(_ROOT_MAP[parts[0]], *parts[1:])
    return PurePosixPath("filesystem", *parts)


def _check_sizes(zipped: Path, infos: list[zipfile.ZipInfo]) -> None:
    """Refuse a zip that would unzip past the caps (``MAX_ENTRY_BYTES``, ``MAX_WORLD_BYTES``, ``MAX_RATIO``), by the
    sizes it declares, before anything is written."""
    for info in infos:
        if info.file_size > MAX_ENTRY_BYTES:
            reason = f"entry {info.filename!r} unzips to {info.file_size} bytes, over the cap of {MAX_ENTRY_BYTES}"
            raise TaskLoadError(zipped, [(None, reason)])
        if info.file_size > max(_RATIO_FLOOR_BYTES, MAX_RATIO * info.compress_size):
            ratio = info.file_size / max(info.compress_size, 1)
            reason = (
                f"entry {info.filename!r} is compressed {ratio:.0f} times, over the cap of {MAX_RATIO} (a zip bomb?)"
            )
            raise TaskLoadError(zipped, [(None, reason)])
    total = sum(info.file_size for info in infos)
    if total > MAX_WORLD_BYTES:
        raise TaskLoadError(zipped, [(None, f"the world unzips to {total} bytes, over the cap of {MAX_WORLD_BYTES}")])


def _unzip_world(zipped: Path, world: Path) -> None:
    try:
        with zipfile.ZipFile(zipped) as archive:
            _check_sizes(zipped, archive.infolist())
            for info in archive.infolist():
                if info.is_dir():
                    continue
                if stat.S_ISLNK(info.external_attr >> 16):  # a link could point anywhere: never materialised
                    raise TaskLoadError(zipped, [(None, f"entry {info.filename!r} is a symbolic link")])
                target = world / _world_path(info.filename, zipped)
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as source, target.open("wb") as out:
                    shutil.copyfileobj(source, out)
    except (zipfile.BadZipFile, OSError) as exc:
        raise TaskLoadError(zipped, [(None, f"cannot unzip: {exc}")]) from None


def _overlay(task_files: Path, world: Path) -> None:
    for path in sorted(task_files.rglob("*")):
        if path.is_symlink():
            raise TaskLoadError(task_files, [(None, f"{path} is a symbolic link")])
        if path.is_file():
            target = world / _world_path(path.relative_to(task_files).as_posix(), task_files)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def _stamp(zipped: Path, task_files: Path | None) -> str:
    """What a built world was made from: the zip's and each task file's size and mtime."""
    sources = [zipped, *(sorted(p for p in task_files.rglob("*") if p.is_file()) if task_files else [])]
    return json.dumps([[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in sources])


def materialize_worlds(root: Path, tasks: Sequence[TaskSpec], worlds: Path) -> Path:
    """Build ``worlds/<world id>/`` for every world ``tasks`` (from ``load_apex_release(root)``) run in; returns
    ``worlds``. A world whose stamp matches its inputs is kept; any other is rebuilt whole (``staged_dir``)."""
    by_world = {task.world_id: task for task in tasks}
    for world_id, task in sorted(by_world.items()):
        zipped = apex_world_zip(root, task)
        extra = _task_files(root, task.task_id) if world_id != task.metadata["apex_world_id"] else None
        stamp, target = _stamp(zipped, extra), worlds / world_id
        if (target / _STAMP).is_file() and (target / _STAMP).read_text() == stamp:
            continue
        with staged_dir(target) as staged:
            (staged / "filesystem").mkdir()
            (staged / "apps_data").mkdir()
            _unzip_world(zipped, staged)
            if extra is not None:
                _overlay(extra, staged)
            atomic_write_text(staged / _STAMP, stamp)
    return worlds
