"""The code-only harness (OpenCode style): seven generic tools over a world, no MCP servers, no app tools.

RECIPE "Evaluation" measures transfer to a harness the policy was not trained with: the same tasks, but only
``bash, glob, read, grep, write, edit, todowrite``. Office files (.xlsx .docx .pdf .pptx) and the mail / chat /
calendar data (JSON under ``../apps_data/``) must be read with code; the packages for that are preinstalled in the
interpreter on PATH (the recipe's harness fix for ``ModuleNotFoundError``).

* ``CodeToolSession(world_root, limits)`` — the ``ToolSession``. The working folder is the world's ``filesystem/``;
  every path argument is relative to it and must resolve inside the world (``envs.paths.resolve_inside``: ``..``
  above the world, absolute paths and symlinks out are refused). ``bash`` runs through
  ``envs.apps.code_exec.run_limited`` (rlimits, a minimal environment, and bubblewrap where usable with the world and
  a scratch folder as the only writable host folders).
* ``code_only_envs(task, worlds_root)`` — the ``EnvFactory``: a private world copy per sample, graded against the
  pristine world (``envs.rollout.copy_envs``, as ``local_envs``).
* Oracle: ``code_only_oracle(task)`` turns each MCP oracle step into a ``bash`` call of the app CLI
  (``python -m envs.apps TOOL '<json>' --world ..``); ``run_code_only_oracle(task, tools)`` runs the task's oracle
  with its ``${name}`` data flow, every step through the session's bash.

Example::

    async with CodeToolSession(Path("worlds/ib-1")) as tools:
        await tools.call("bash", {"command": "python -c 'import openpyxl; print(openpyxl.__version__)'"})
        await tools.call("read", {"path": "reference/fx_eur_usd.txt"})
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from envs.apps import ToolError
from envs.apps.base import encodable_text, validate_arguments
from envs.apps.code_exec import MAX_CODE_CHARS, MAX_TIMEOUT_S, ExecResult, run_limited
from envs.apps.filesystem import read_text_or_none
from envs.files import atomic_write_text
from envs.graders import Judge
from envs.harness.agent import EnvFactory
from envs.harness.parsing import ToolCall
from envs.harness.tools import InProcessSession, ToolOutcome
from envs.oracle import OracleError, OracleRun, require_oracle, run_oracle
from envs.paths import PathEscapeError, resolve_inside
from envs.rollout import copy_envs
from envs.sandbox.limits import Mount, ResourceLimits
from envs.types import TaskSpec

__all__ = [
    "CODE_TOOLS",
    "CodeToolSession",
    "app_cli_command",
    "code_only_envs",
    "code_only_oracle",
    "run_bash",
    "run_code_only_oracle",
]

FILESYSTEM = "filesystem"
DEFAULT_BASH_TIMEOUT_S = 30.0
ORACLE_STEP_TIMEOUT_S = 120.0
MAX_GLOB_RESULTS = 500
MAX_GREP_HITS = 200
MAX_GREP_FILE_BYTES = 2_000_000
MAX_LINE_CHARS = 2000
DEFAULT_READ_LINES = 2000

# What to read each binary office format with (the packages are installed in the interpreter bash puts on PATH).
CODE_READERS: dict[str, str] = {
    ".xlsx": "openpyxl (python -c \"import openpyxl; wb = openpyxl.load_workbook('FILE', data_only=True); ...\")",
    ".docx": "python-docx (python -c \"import docx; [print(p.text) for p in docx.Document('FILE').paragraphs]\")",
    ".pdf": "pdfplumber (python -c \"import pdfplumber; print(pdfplumber.open('FILE').pages[0].extract_text())\")",
    ".pptx": "python-pptx (python -c \"import pptx; deck = pptx.Presentation('FILE'); ...\")",
}


# --- bash ------------------------------------------------------------------------------------------------------------


def run_bash(
    command: str,
    *,
    cwd: Path,
    writable: Path,
    timeout_s: float,
    limits: ResourceLimits | None,
    mounts: Sequence[Mount] = (),
) -> ExecResult:
    """``bash -c command`` in ``cwd`` through ``run_limited``, with ``writable`` (which holds ``cwd``) as the only
    writable world folder under bubblewrap and ``run_limited``'s minimal environment.

    ``run_limited`` starts the process in the folder it makes writable, so ``env --chdir`` moves it into ``cwd``
    (the world's ``filesystem/``, while ``../apps_data`` stays visible inside the sandbox), or into a path of
    ``mounts`` (a Harbor task's ``/app``).
    """
    if len(command) > MAX_CODE_CHARS:
        raise ToolError(
            f"the command is {len(command)} characters (limit {MAX_CODE_CHARS}); write the script to a file with "
            "the write tool and run that file"
        )
    bash = shutil.which("bash") or "/bin/bash"
    env = shutil.which("env") or "/usr/bin/env"
    # PWD too: bwrap sets it to its own --chdir, which bash trusts while it names the same folder (a bind mount of it)
    argv = [env, f"--chdir={cwd.resolve()}", f"PWD={cwd.resolve()}", bash, "-c", command]
    return run_limited(argv, writable, timeout_s, limits=limits, mounts=mounts)


# --- arguments -------------------------------------------------------------------------------------------------------


def _capped(lines: list[str], limit: int, hint: str) -> str:
    """The first ``limit`` lines, then one line saying how many were left out and what to do about it."""
    extra = len(lines) - limit
    return "\n".join(lines[:limit]) + (f"\n[… {extra} {hint}]" if extra > 0 else "")


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


Timeout = Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S, description="wall-clock limit in seconds (at most 600)")]


class BashArgs(_Arguments):
    command: str = Field(description="the bash command line, run as `bash -c COMMAND`")
    timeout_s: Timeout = DEFAULT_BASH_TIMEOUT_S


class GlobArgs(_Arguments):
    pattern: str = Field(min_length=1, description='glob pattern, e.g. "**/*.xlsx" or "reports/*.pdf"')
    path: str = Field(".", description="folder to search from, relative to the working folder")


class ReadArgs(_Arguments):
    path: str = Field(description="file path relative to the working folder")
    offset: int = Field(1, ge=1, description="first line to show (1-based)")
    limit: int = Field(DEFAULT_READ_LINES, ge=1, description="how many lines to show")


class GrepArgs(_Arguments):
    pattern: str = Field(min_length=1, description="Python regular expression searched line by line")
    path: str = Field(".", description="file or folder to search, relative to the working folder")
    glob: str | None = Field(None, description='only files whose name matches this glob, e.g. "*.txt"')


class WriteArgs(_Arguments):
    path: str = Field(description="file path relative to the working folder (missing folders are created)")
    content: str = Field(description="the complete new text of the file")


class EditArgs(_Arguments):
    path: str = Field(description="file path relative to the working folder")
    old_string: str = Field(min_length=1, description="exact text to replace (whitespace included)")
    new_string: str = Field(description="the replacement text")
    replace_all: bool = Field(False, description="replace every occurrence instead of requiring exactly one")


class TodoStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class Todo(_Arguments):
    content: str = Field(min_length=1)
    status: TodoStatus


class TodoWriteArgs(_Arguments):
    todos: list[Todo] = Field(description="the whole updated list: every item with its content and status")


# --- the tool registry -----------------------------------------------------------------------------------------------

Handler = Callable[[Any, Any], "str | ExecResult"]
"""``(session, validated arguments) →`` the tool's text, or (bash) an ``ExecResult`` whose non-zero exit or timeout
marks the call failed."""


@dataclass(frozen=True)
class CodeTool:
    name: str
    description: str
    arguments: type[_Arguments]
    run: Handler

    def spec(self) -> dict[str, Any]:
        """The listing the chat template shows: ``{"name", "description", "input_schema"}``."""
        schema = self.arguments.model_json_schema()
        schema.pop("title", None)
        return {"name": self.name, "description": self.description, "input_schema": schema}


CODE_TOOLS: dict[str, CodeTool] = {}


def _code_tool(name: str, arguments: type[_Arguments], description: str) -> Callable[[Handler], Handler]:
    def register(run: Handler) -> Handler:
        CODE_TOOLS[name] = CodeTool(name, description, arguments, run)
        return run

    return register


class RegistryToolSession(InProcessSession):
    """A ``ToolSession`` over a fixed set of ``CodeTool``s run in a worker thread; subclasses give the tools their
    folder. Bad arguments, refused paths and ``ToolError``s come back as error outcomes the model can read."""

    def __init__(self, tools: dict[str, CodeTool]) -> None:
        self.tools = tools

    async def list_tools(self) -> list[dict[str, Any]]:
        return [tool.spec() for tool in self.tools.values()]

    async def call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        started = time.perf_counter()
        try:
            tool = self.tools.get(name)
            if tool is None:
                raise ToolError(f"unknown tool {name!r}; tools are: {', '.join(self.tools)}")
            validated = validate_arguments(name, args, tool.arguments)
            reply = await asyncio.to_thread(tool.run, self, validated)
        except (ToolError, PathEscapeError) as error:
            message = encodable_text(f"{error}")
            return ToolOutcome(message, is_error=True, latency_s=time.perf_counter() - started, returned_empty=False)
        except OSError as error:
            message = f"{name}: {self.hide_paths(f'{error.strerror or type(error).__name__}: {error.filename}')}"
            message = encodable_text(message)
            return ToolOutcome(message, is_error=True, latency_s=time.perf_counter() - started, returned_empty=False)
        latency_s = time.perf_counter() - started
        if isinstance(reply, ExecResult):
            failed = reply.exit_code != 0 or reply.timed_out
            text = reply.render(reply.wall_s)
            return ToolOutcome(
                text, is_error=failed, latency_s=latency_s, returned_empty=False, timed_out=reply.timed_out
            )
        return ToolOutcome(encodable_text(reply), is_error=False, latency_s=latency_s, returned_empty=not reply)

    def hide_paths(self, text: str) -> str:
        """``text`` without the host's absolute paths (subclasses know their folders)."""
        return text


class CodeToolSession(RegistryToolSession):
    """The code-only tools over one world folder (``world_root/filesystem`` is the working folder)."""

    def __init__(self, world_root: Path, limits: ResourceLimits | None = None) -> None:
        super().__init__(CODE_TOOLS)
        self.world_root = world_root.resolve()
        self.fs_root = self.world_root / FILESYSTEM
        if not self.fs_root.is_dir():
            raise FileNotFoundError(f"world {world_root} has no {FILESYSTEM}/ folder")
        self.limits = limits
        self.todos: list[Todo] = []

    # --- helpers shared by the tools ---

    def bash(self, command: str, timeout_s: float = DEFAULT_BASH_TIMEOUT_S) -> ExecResult:
        """Run ``command`` in the working folder (synchronously: the oracle and the ``bash`` tool both use it)."""
        return run_bash(command, cwd=self.fs_root, writable=self.world_root, timeout_s=timeout_s, limits=self.limits)

    def resolve(self, path: str) -> Path:
        """``path`` (relative to ``filesystem/``) resolved, refused when it leaves the world."""
        if os.path.isabs(path) or path.startswith("~"):
            raise PathEscapeError(
                f"absolute paths are not allowed: {path!r} (use a path relative to the working folder)"
            )
        try:
            return resolve_inside(self.world_root, f"{FILESYSTEM}/{path}")
        except PathEscapeError:
            raise PathEscapeError(f"path leaves the world: {path!r}") from None

    def shown(self, file: Path) -> str:
        """How the model sees ``file``: relative to the working folder (``../apps_data/...`` for the app data)."""
        return os.path.relpath(file, self.fs_root)

    def hide_paths(self, text: str) -> str:
        return text.replace(f"{self.fs_root}/", "").replace(str(self.world_root), "..")

    def inside(self, file: Path) -> bool:
        """Whether ``file`` (a path found by walking a folder) resolves inside the world: symlinks out are skipped."""
        return file.resolve().is_relative_to(self.world_root)

    def existing_file(self, path: str) -> Path:
        file = self.resolve(path)
        if file.is_dir():
            raise ToolError(f"{path!r} is a folder, not a file (list it with glob)")
        if not file.is_file():
            raise ToolError(f"no file {path!r} (find files with glob, e.g. pattern '**/*')")
        return file


@_code_tool(
    "bash",
    BashArgs,
    "Run a bash command line in the working folder (the world's filesystem/; mail, chat and calendar data are JSON "
    "files under ../apps_data/). `python` is an interpreter with openpyxl, python-docx, pdfplumber, python-pptx and "
    "pandas installed: use it to read .xlsx/.docx/.pdf/.pptx files and to compute. No network. Returns "
    '"exit_code: N", then the "stdout:" and "stderr:" sections (each cut to its first and last 10 000 bytes); on '
    "timeout the process and its children are killed.",
)
def _bash(session: CodeToolSession, args: BashArgs) -> ExecResult:
    return session.bash(args.command, args.timeout_s)


@_code_tool(
    "glob",
    GlobArgs,
    'Find files by name pattern ("**" matches any number of folders), e.g. "**/*.xlsx". Returns matching paths '
    f"relative to the working folder, one per line, sorted (at most {MAX_GLOB_RESULTS}).",
)
def _glob(session: CodeToolSession, args: GlobArgs) -> str:
    top = session.resolve(args.path)
    if not top.is_dir():
        raise ToolError(f"no folder {args.path!r} to search from")
    if os.path.isabs(args.pattern) or ".." in Path(args.pattern).parts:
        raise ToolError(f"pattern {args.pattern!r} must be relative and without '..' (set path to search elsewhere)")
    found = sorted(session.shown(p) for p in top.glob(args.pattern) if p.is_file() and session.inside(p))
    if not found:
        return f"no files match {args.pattern!r} under {session.shown(top)!r}"
    return _capped(found, MAX_GLOB_RESULTS, "more; narrow the pattern")


@_code_tool(
    "read",
    ReadArgs,
    "Read a text file; lines come numbered (`N\\tline`), from line `offset` (1-based), at most `limit` lines, long "
    f"lines cut at {MAX_LINE_CHARS} characters. Binary files (.xlsx .docx .pdf .pptx ...) cannot be read this way: "
    "read them with python through bash.",
)
def _read(session: CodeToolSession, args: ReadArgs) -> str:
    file = session.existing_file(args.path)
    text = read_text_or_none(file)
    if text is None:
        reader = CODE_READERS.get(file.suffix.lower())
        how = f"with {reader.replace('FILE', session.shown(file))}" if reader else "with python through bash"
        raise ToolError(f"{args.path!r} is a binary file, not text: read it with code, {how}")
    lines = text.splitlines()
    if not lines:
        return f"({args.path!r} is empty)"
    if args.offset > len(lines):
        raise ToolError(f"offset {args.offset} is past the end: {args.path!r} has {len(lines)} lines")
    shown = lines[args.offset - 1 : args.offset - 1 + args.limit]
    body = "\n".join(f"{args.offset + i}\t{line[:MAX_LINE_CHARS]}" for i, line in enumerate(shown))
    last = args.offset - 1 + len(shown)
    return body + (
        f"\n[… lines {last + 1}-{len(lines)} not shown; read on with offset={last + 1}]" if last < len(lines) else ""
    )


@_code_tool(
    "grep",
    GrepArgs,
    "Search text files for a regular expression (Python syntax), line by line, under a file or folder; `glob` "
    'limits the file names searched (e.g. "*.md"). Binary files are skipped. Returns `path:line: text` per match '
    f"(at most {MAX_GREP_HITS}).",
)
def _grep(session: CodeToolSession, args: GrepArgs) -> str:
    try:
        regex = re.compile(args.pattern)
    except re.error as error:
        raise ToolError(f"invalid regular expression {args.pattern!r}: {error}") from None
    top = session.resolve(args.path)
    if not top.exists():
        raise ToolError(f"no file or folder {args.path!r}")
    files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
    hits: list[str] = []
    for file in files:
        if args.glob and not fnmatch.fnmatch(file.name, args.glob):
            continue
        if not session.inside(file) or file.stat().st_size > MAX_GREP_FILE_BYTES:
            continue
        text = read_text_or_none(file)
        for number, line in enumerate((text or "").splitlines(), start=1):
            if regex.search(line):
                hits.append(f"{session.shown(file)}:{number}: {line[:MAX_LINE_CHARS]}")
    if not hits:
        return f"no matches for {args.pattern!r} under {args.path!r}"
    return _capped(hits, MAX_GREP_HITS, "more matches; narrow the search")


@_code_tool(
    "write",
    WriteArgs,
    "Create or overwrite a text file with the given content (missing folders are created). To change part of an "
    "existing file use edit.",
)
def _write(session: CodeToolSession, args: WriteArgs) -> str:
    file = session.resolve(args.path)
    if file.is_dir():
        raise ToolError(f"{args.path!r} is a folder, not a file")
    atomic_write_text(file, args.content)
    return f"wrote {len(args.content)} characters to {session.shown(file)}"


@_code_tool(
    "edit",
    EditArgs,
    "Replace exact text in a text file: `old_string` must occur exactly once (give more surrounding lines to make "
    "it unique) unless replace_all is true.",
)
def _edit(session: CodeToolSession, args: EditArgs) -> str:
    file = session.existing_file(args.path)
    text = read_text_or_none(file)
    if text is None:
        raise ToolError(f"{args.path!r} is a binary file: edit it with python through bash")
    if args.old_string == args.new_string:
        raise ToolError("old_string and new_string are the same: nothing to change")
    count = text.count(args.old_string)
    if count == 0:
        raise ToolError(f"old_string not found in {args.path!r} (read the file and copy the text exactly)")
    if count > 1 and not args.replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {args.path!r}: add context to make it unique or set replace_all"
        )
    atomic_write_text(file, text.replace(args.old_string, args.new_string))
    return f"replaced {count if args.replace_all else 1} occurrence(s) in {session.shown(file)}"


@_code_tool(
    "todowrite",
    TodoWriteArgs,
    "Keep a todo list for a multi-step task: pass the whole updated list every time, each item with `content` and "
    "`status` (pending, in_progress or completed). Returns the list.",
)
def _todowrite(session: CodeToolSession, args: TodoWriteArgs) -> str:
    session.todos = list(args.todos)
    marks = {TodoStatus.PENDING: "[ ]", TodoStatus.IN_PROGRESS: "[~]", TodoStatus.COMPLETED: "[x]"}
    done = sum(todo.status is TodoStatus.COMPLETED for todo in session.todos)
    lines = [f"{marks[todo.status]} {todo.content}" for todo in session.todos]
    return "\n".join([f"{done}/{len(session.todos)} completed", *lines])


# --- environments ----------------------------------------------------------------------------------------------------


def code_only_envs(
    task: TaskSpec, worlds_root: Path, limits: ResourceLimits | None = None, judge: Judge | None = None
) -> EnvFactory:
    """Each sample: a private copy of the task's world, the code-only tools over it, graded against the pristine
    (``judge`` decides its ``llm_judge`` criteria)."""
    return copy_envs(task, worlds_root, lambda copy: CodeToolSession(copy, limits), "code-only", judge)


# --- oracle ----------------------------------------------------------------------------------------------------------


def app_cli_command(tool: str, args: dict[str, Any]) -> str:
    """The bash line that runs one app operation on the world from its ``filesystem/`` (see ``envs/apps/__main__``)."""
    return f"python -m envs.apps {tool} {shlex.quote(json.dumps(args))} --world .."


def code_only_oracle(task: TaskSpec) -> list[ToolCall]:
    """The task's oracle as ``bash`` calls of the app CLI; ``${name}`` references are left for the runner to fill."""
    return [
        ToolCall("bash", {"command": app_cli_command(step.tool, step.args), "timeout_s": ORACLE_STEP_TIMEOUT_S})
        for step in require_oracle(task).steps
    ]


def run_code_only_oracle(task: TaskSpec, tools: CodeToolSession) -> OracleRun:
    """Run the task's oracle (``envs.oracle.run_oracle``: same ``${name}`` data flow) with every step a bash call of
    the app CLI in ``tools``' world; a step that exits non-zero fails the run with the CLI's stderr."""

    def call_tool(name: str, args: dict[str, Any]) -> str:
        result = tools.bash(app_cli_command(name, args), ORACLE_STEP_TIMEOUT_S)
        if result.exit_code != 0 or result.timed_out:
            raise OracleError(f"exit code {result.exit_code}: {result.stderr.strip()[-2000:]}")
        return result.stdout.removesuffix("\n")

    return run_oracle(require_oracle(task), call_tool)
