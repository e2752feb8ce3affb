"""Load tasks into ``TaskSpec``: our own JSONL and Harbor task folders (APEX-Agents releases: ``envs.apex``).

* ``load_jsonl`` / ``save_jsonl`` — one ``TaskSpec`` JSON object per line (the save is atomic).
* ``load_harbor`` / ``load_harbor_dir`` — Harbor task folders: ``instruction.md`` (the prompt), ``task.toml``
  (``[metadata]`` difficulty / category / tags, ``[verifier]`` and ``[agent]`` ``timeout_sec``, ``[environment]``
  docker_image / build_timeout_sec / cpus / memory_mb / storage_mb, in ``metadata["environment"]``), ``tests/test.sh``
  (the verifier, whose reward the single ``verifier_reward`` criterion reads) and optional ``solution/solve.sh``
  (the oracle, run as one ``code_exec.run_bash`` call).

Malformed input raises ``TaskLoadError`` naming the file, the line / row (or the task folder), the field and the
reason. Loading is all or nothing: a file with one bad row loads no task. A Harbor task folder is written by someone
else: every path it names and every symlink in it must stay inside it (``resolve_task_path``), or a host file would
reach the prompt or the sandbox.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.errors import RecipeError
from envs.files import atomic_write_text
from envs.jsonio import JsonError, json_line, json_lines, parse_json
from envs.paths import PathEscapeError, resolve_inside
from envs.types import Criterion, Domain, Oracle, OracleStep, TaskSpec, VerifierReward

_CRITERION_KINDS = frozenset(member.model_fields["kind"].default for member in get_args(get_args(Criterion)[0]))


class TaskLoadError(RecipeError, ValueError):
    """A task source that cannot be loaded: ``source`` (file or task folder), ``where`` (``line 3``, ``row 2``) and
    ``problems`` as (field or None, reason) pairs."""

    def __init__(self, source: Path, problems: list[tuple[str | None, str]], where: str | None = None) -> None:
        self.source, self.where, self.problems = source, where, problems
        location = f"{source}, {where}" if where else str(source)
        reasons = "; ".join(f"field '{field}': {reason}" if field else reason for field, reason in problems)
        super().__init__(f"{location}: {reasons}")


# --- pydantic errors, rephrased --------------------------------------------------------------------------------------


def _field_path(loc: tuple[int | str, ...]) -> str | None:
    """``('rubric', 0, 'answer_numeric', 'expected')`` → ``rubric[0].expected`` (the union tag is not a field)."""
    parts: list[str] = []
    for position, part in enumerate(loc):
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif not (part in _CRITERION_KINDS and position > 0 and isinstance(loc[position - 1], int)):
            parts.append(f".{part}" if parts else part)
    return "".join(parts) or None


def _reason(error: dict[str, Any]) -> str:
    if error["type"] == "missing":
        return "is required but missing"
    if error["type"] == "extra_forbidden":
        return "is not a known field"
    shown = repr(error["input"])
    return f"{error['msg']} (got {shown[:80]}{'…' if len(shown) > 80 else ''})"


def _problems(exc: ValidationError, rename: Callable[[str], str] = str) -> list[tuple[str | None, str]]:
    problems = []
    for error in exc.errors():
        field = _field_path(error["loc"])
        problems.append((rename(field) if field else None, _reason(error)))
    return problems


# --- our JSONL -------------------------------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskLoadError(path, [(None, f"cannot read: {exc}")]) from None


def _json_lines(path: Path) -> list[tuple[str, Any]]:
    """(``line N``, parsed object) for every non-blank line (lines end at ``\\n`` only, see ``envs.jsonio``)."""
    rows = []
    for number, line in json_lines(_read_text(path)):
        try:
            rows.append((f"line {number}", parse_json(line)))
        except JsonError as exc:
            raise TaskLoadError(path, [(None, f"invalid JSON: {exc}")], f"line {number}") from None
    return rows


def _unique(tasks: list[tuple[str, TaskSpec]], source: Path) -> list[TaskSpec]:
    first_seen: dict[str, str] = {}
    for where, task in tasks:
        if task.task_id in first_seen:
            reason = f"duplicate task_id {task.task_id!r} (first at {first_seen[task.task_id]})"
            raise TaskLoadError(source, [("task_id", reason)], where)
        first_seen[task.task_id] = where
    return [task for _, task in tasks]


def load_jsonl(path: Path) -> list[TaskSpec]:
    """Tasks saved by ``save_jsonl``: one ``TaskSpec`` object per line; blank lines are skipped."""
    tasks = []
    for where, row in _json_lines(path):
        try:
            tasks.append((where, TaskSpec.model_validate(row)))
        except ValidationError as exc:
            raise TaskLoadError(path, _problems(exc), where) from None
    return _unique(tasks, path)


def save_jsonl(tasks: Iterable[TaskSpec], path: Path) -> None:
    """Write one task per line, non-ASCII escaped (``envs.jsonio.json_line``), atomically (``atomic_write_text``)."""
    tasks = list(tasks)
    seen: set[str] = set()
    for task in tasks:
        if task.task_id in seen:
            raise ValueError(f"cannot save {path}: duplicate task_id {task.task_id!r} (load_jsonl would refuse it)")
        seen.add(task.task_id)
    atomic_write_text(path, "".join(json_line(task.model_dump(mode="json")) for task in tasks))


# --- Harbor ----------------------------------------------------------------------------------------------------------


class _HarborMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    difficulty: str | None = None
    category: str | None = None
    tags: list[str] = Field(default_factory=list)


class _HarborTimeout(BaseModel):
    model_config = ConfigDict(extra="allow")

    timeout_sec: float | None = Field(default=None, gt=0)


class _HarborEnvironment(BaseModel):
    """``[environment]``: how Harbor builds the task's container and what it may use."""

    model_config = ConfigDict(extra="allow")

    docker_image: str | None = None  # a prebuilt image instead of building environment/Dockerfile
    build_timeout_sec: float | None = Field(default=None, gt=0)
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    storage_mb: int | None = Field(default=None, gt=0)


class _HarborToml(BaseModel):
    # task.toml has more tables and keys (version, [solution], ...) than a TaskSpec needs; they are ignored.
    model_config = ConfigDict(extra="allow")

    metadata: _HarborMetadata = Field(default_factory=_HarborMetadata)
    verifier: _HarborTimeout = Field(default_factory=_HarborTimeout)
    agent: _HarborTimeout = Field(default_factory=_HarborTimeout)
    environment: _HarborEnvironment = Field(default_factory=_HarborEnvironment)


_HARBOR_ENVIRONMENT_KEYS = set(_HarborEnvironment.model_fields)
HARBOR_TEST_SCRIPT = Path("tests") / "test.sh"
HARBOR_SOLUTION_SCRIPT = Path("solution") / "solve.sh"


def _inside(root: Path, relative: str) -> Path:
    try:
        return resolve_inside(root, relative)
    except PathEscapeError:
        reason = (
            "leaves the folder (an absolute path, a '..' or a symlink pointing outside): it could bring a host file in"
        )
        raise TaskLoadError(root, [(relative, reason)]) from None


def resolve_task_path(root: Path, relative: str) -> Path:
    """``root / relative`` resolved (``root``: a task folder or its build context); ``TaskLoadError`` naming it when it
    leaves ``root`` (an absolute path, a ``..``, a symlink pointing outside) or, for a folder, when any symlink under
    it does. Whoever copies the result must keep its links as links (``symlinks=True``): a link is checked, not the
    folder it points to."""
    path = _inside(root, relative)
    resolved_root = root.resolve()
    for folder, dirs, files in os.walk(path) if path.is_dir() else ():
        for name in dirs + files:
            entry = Path(folder, name)
            if entry.is_symlink():
                _inside(resolved_root, entry.relative_to(resolved_root).as_posix())
    return path


def _harbor_toml(task_dir: Path) -> _HarborToml:
    toml_path = task_dir / "task.toml"
    if not toml_path.is_file():
        raise TaskLoadError(task_dir, [("task.toml", "is missing")])
    try:
        data = tomllib.loads(_read_text(toml_path))
    except RecursionError:
        raise TaskLoadError(toml_path, [(None, "invalid TOML: arrays / tables nested too deep")]) from None
    except ValueError as exc:  # TOMLDecodeError, or an integer past Python's int↔str digit limit
        raise TaskLoadError(toml_path, [(None, f"invalid TOML: {exc}")]) from None
    try:
        return _HarborToml.model_validate(data)
    except ValidationError as exc:
        raise TaskLoadError(toml_path, _problems(exc)) from None


def load_harbor(task_dir: Path) -> TaskSpec:
    """One Harbor task folder → a terminal-domain ``TaskSpec`` graded by its verifier's reward."""
    if not task_dir.is_dir():
        raise TaskLoadError(task_dir, [(None, "is not a folder")])
    resolve_task_path(task_dir, ".")  # its prompt, scripts and environment: never a host file through a link
    instruction = task_dir / "instruction.md"
    if not instruction.is_file():
        raise TaskLoadError(task_dir, [("instruction.md", "is missing")])
    prompt = _read_text(instruction).strip()
    if not prompt:
        raise TaskLoadError(task_dir, [("instruction.md", "is empty")])
    config = _harbor_toml(task_dir)
    if not (task_dir / HARBOR_TEST_SCRIPT).is_file():
        raise TaskLoadError(task_dir, [(HARBOR_TEST_SCRIPT.as_posix(), "is missing (the verifier script Harbor runs)")])
    solution = task_dir / HARBOR_SOLUTION_SCRIPT
    agent_timeout = config.agent.timeout_sec
    oracle = None
    if solution.is_file():
        # Oracle arguments are ${name} templates (envs.oracle.substitute): the shell's own "$" must be escaped.
        args: dict[str, Any] = {"command": _read_text(solution).replace("$", "$$")}
        if agent_timeout is not None:
            args["timeout_s"] = agent_timeout
        oracle = Oracle(steps=[OracleStep(tool="code_exec.run_bash", args=args)])
    try:
        return TaskSpec(
            task_id=task_dir.name,
            world_id=task_dir.name,  # a Harbor task brings its own environment: it is its own world
            domain=Domain.TERMINAL,
            prompt=prompt,
            rubric=[VerifierReward()],
            oracle=oracle,
            metadata={
                "source": "harbor",
                "task_dir": str(task_dir.resolve()),
                "difficulty": config.metadata.difficulty,
                "category": config.metadata.category,
                "tags": config.metadata.tags,
                "verifier_timeout_sec": config.verifier.timeout_sec,
                "agent_timeout_sec": agent_timeout,
                "environment": config.environment.model_dump(include=_HARBOR_ENVIRONMENT_KEYS),
            },
        )
    except ValidationError as exc:
        raise TaskLoadError(task_dir, _problems(exc)) from None


def load_harbor_dir(root: Path) -> list[TaskSpec]:
    """Every sub-folder of ``root`` is a Harbor task folder (sorted by name), but hidden ones and ``__pycache__`` (which
    Python writes beside an ``__init__.py`` on import, as in the bundled tasks' package); one bad folder loads none."""
    if not root.is_dir():
        raise TaskLoadError(root, [(None, "is not a folder")])
    task_dirs = sorted(
        path for path in root.iterdir() if path.is_dir() and not path.name.startswith((".", "__pycache__"))
    )
    if not task_dirs:
        raise TaskLoadError(root, [(None, "holds no task folders")])
    return [load_harbor(task_dir) for task_dir in task_dirs]
