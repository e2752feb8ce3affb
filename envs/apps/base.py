"""The shared machinery of the app operations: the ``World`` handle, ``ToolError``, atomic writes, the tool registry.

Every app operation is a plain function ``op(world: World, ...) -> str`` registered with ``@tool(app)`` under the name
``<app>.<op>``. ``call_tool`` is the one door the harnesses, MCP servers and oracles go through: it validates the
arguments against the function signature with pydantic and turns every expected failure (bad arguments, a path that
leaves the world, an OS error) into a ``ToolError`` whose message a model can act on.

Example::

    world = World(Path("worlds/ib-1"))
    call_tool(world, "sheets.read_cell", {"path": "models/operating_model.xlsx", "sheet": "Model", "cell": "C5"})
    # -> "412.5"
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, create_model

from envs.apps.office_files import OfficeFileError, check_office_file
from envs.files import atomic_write_json, file_kind, read_regular_bytes
from envs.options import APP_NAMES
from envs.paths import PathEscapeError, resolve_inside


class ToolError(Exception):
    """An operation failed in a way the model can fix (wrong path, sheet, id, argument...); the message says how."""


# Which tool reads a file of a given binary format: used in error messages that point the model to the right app.
READER_BY_SUFFIX: dict[str, str] = {
    ".docx": "docs.read_document",
    ".xlsx": "sheets.read_sheet",
    ".pdf": "pdf.read_pdf",
    ".pptx": "slides.read_deck",
}


MAX_PATH_PARTS = 64
"""Deepest path a tool accepts: far past any real folder tree, far short of the ~1000 missing folders at which
``Path.mkdir(parents=True)`` (one recursion per folder) fails with a RecursionError instead of an OSError."""


@dataclass(frozen=True)
class World:
    """A world folder: ``filesystem/`` holds the company's files, ``apps_data/`` the mail, chat and calendar state."""

    root: Path

    @property
    def fs_root(self) -> Path:
        return self.root / "filesystem"

    @property
    def apps_root(self) -> Path:
        return self.root / "apps_data"

    def path(self, rel: str) -> Path:
        """Resolve ``rel`` (relative to ``filesystem/``), refusing ``..``, absolute paths and symlinks that leave it,
        and paths of more than ``MAX_PATH_PARTS`` parts."""
        if isinstance(rel, str) and rel.count("/") >= MAX_PATH_PARTS:
            raise ToolError(f"path {rel[:40]!r}... has more than {MAX_PATH_PARTS} parts; use a shallower path")
        return resolve_inside(self.fs_root, rel)

    def rel(self, file: Path) -> str:
        """The path of ``file`` relative to ``filesystem/``, as the model sees it."""
        return file.relative_to(self.fs_root.resolve()).as_posix() or "."


# --- file helpers ----------------------------------------------------------------------------------------------------


def existing_file(world: World, path: str, suffixes: tuple[str, ...]) -> Path:
    """Resolve ``path`` to an existing file whose extension is one of ``suffixes``, or raise a helpful ToolError."""
    file = world.path(path)
    if file.suffix.lower() not in suffixes:
        wanted = " or ".join(suffixes)
        reader = READER_BY_SUFFIX.get(file.suffix.lower(), "filesystem.read_file")
        raise ToolError(f"{path!r} is not a {wanted} file (extension {file.suffix or 'none'!r}); read it with {reader}")
    if file.is_dir():
        raise ToolError(f"{path!r} is a directory, not a file")
    if not file.exists():
        raise ToolError(f"no file {path!r} in the filesystem{_nearby_hint(world, file, suffixes)}")
    if not file.is_file():
        raise ToolError(f"{path!r} is not a regular file but {file_kind(file.stat().st_mode)}; tools read files only")
    return file


def _nearby_hint(world: World, missing: Path, suffixes: tuple[str, ...]) -> str:
    """Name the files with a matching extension in the closest existing folder, best matches first."""
    root = world.fs_root.resolve()
    folder = missing.parent  # inside root: ``missing`` came from World.path
    while folder != root and not folder.is_dir():
        folder = folder.parent
    if not folder.is_dir():
        return ""
    candidates = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    if not candidates:
        return f"; {world.rel(folder)}/ holds no {'/'.join(suffixes)} files (use filesystem.list_files)"
    close = difflib.get_close_matches(missing.name, candidates, n=5, cutoff=0.0)
    return f"; {'/'.join(suffixes)} files in {world.rel(folder)}/: {', '.join(close)}"


Loaded = TypeVar("Loaded")


def open_with(loader: Callable[[Path], Loaded], file: Path, kind: str) -> Loaded:
    """Open ``file`` with a third-party parser, turning its failure on a corrupt file into a ToolError.

    First ``check_office_file``: a FIFO or other special file (which would block the parser forever) and an office file
    past the size limits (a zip bomb, a sheet that expands to billions of cells) are refused before the parser sees
    them. The parsers (openpyxl, python-docx, python-pptx, pdfplumber) raise many unrelated exception types on bad
    input, hence the broad catch; an OSError still propagates so ``call_tool`` reports it as such.
    """
    try:
        check_office_file(file)
    except OfficeFileError as error:
        raise ToolError(f"cannot open {file.name} as {kind}: {error}") from None
    try:
        return loader(file)
    except OSError:
        raise
    except Exception as error:
        raise ToolError(f"cannot open {file.name} as {kind}: {type(error).__name__}: {error}") from error


# --- app state (mail, chat, calendar) ---------------------------------------------------------------------------------

State = TypeVar("State", bound=BaseModel)


def load_app_state(world: World, rel: str, model: type[State]) -> State:
    """Load and validate ``apps_data/<rel>`` (e.g. ``mail/mailbox.json``) into ``model``."""
    file = world.apps_root / rel
    if not file.is_file():
        raise ToolError(f"this world has no {rel.split('/')[0]} data (apps_data/{rel} is missing)")
    try:
        return model.model_validate_json(read_regular_bytes(file))
    except ValidationError as error:
        raise ToolError(f"apps_data/{rel} is malformed: {error}") from error


def save_app_state(world: World, rel: str, state: BaseModel) -> None:
    atomic_write_json(world.apps_root / rel, state.model_dump(mode="json", by_alias=True))


def next_id(prefix: str, existing: list[str]) -> str:
    """The id after the largest numeric suffix among ``existing`` ids with ``prefix``, same zero-padding.

    ``m007`` -> ``m008``, ``t09`` -> ``t10``; ``m001`` when there are none.
    """
    suffixes = [i[len(prefix) :] for i in existing if i.startswith(prefix) and i[len(prefix) :].isdigit()]
    width = max((len(s) for s in suffixes), default=3)
    return f"{prefix}{max((int(s) for s in suffixes), default=0) + 1:0{width}d}"


def matches(query: str, *fields: str) -> bool:
    """True when every whitespace-separated term of ``query`` occurs (case-insensitively) in one of ``fields``."""
    terms = query.lower().split()
    if not terms:
        raise ToolError("the search query is empty; pass one or more words to look for")
    haystack = "\n".join(fields).lower()
    return all(term in haystack for term in terms)


# Worlds use naive local times; an offset in the data is dropped so that every comparison is between naive values.
Timestamp = Annotated[datetime, AfterValidator(lambda value: value.replace(tzinfo=None))]


class AppRecord(BaseModel):
    """A record of an app's state file (an event, a message, a mailbox): fields a world's author added are kept, so
    what a tool saves back loses nothing it did not change."""

    model_config = ConfigDict(extra="allow")


def parse_timestamp(value: str, what: str) -> datetime:
    """Parse an ISO date or date-time (``2026-03-04`` or ``2026-03-04T10:00:00``), naive, or raise a ToolError."""
    try:
        return datetime.fromisoformat(value).replace(tzinfo=None)
    except ValueError as error:
        raise ToolError(f"bad {what} {value!r}: use ISO format, e.g. 2026-03-04 or 2026-03-04T10:00:00") from error


def now() -> datetime:
    return datetime.now().replace(microsecond=0)


# --- the tool registry ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    """A registered operation: ``fn(world, **arguments) -> str``; ``arguments`` is the pydantic model of those."""

    name: str
    app: str
    fn: Callable[..., str]
    description: str
    arguments: type[BaseModel]


# Each app's module registers its tools when imported; the registry imports one when a name needs it, so one call (a
# shell line of the code-only harness, `python -m envs.apps`) loads one app's file library, not all nine (1.6 s).
TOOLS: dict[str, Tool] = {}

Op = TypeVar("Op", bound=Callable[..., str])
ArgsModel = TypeVar("ArgsModel", bound=BaseModel)


def tool(app: str) -> Callable[[Op], Op]:
    """Register ``fn`` as the tool ``<app>.<fn name>``; its docstring is the description a model reads."""

    def register(fn: Op) -> Op:
        name = f"{app}.{fn.__name__}"
        if name in TOOLS:
            raise ValueError(f"tool {name} is registered twice")
        if not fn.__doc__:
            raise ValueError(f"tool {name} needs a docstring: it is the description the model reads")
        TOOLS[name] = Tool(name, app, fn, inspect.cleandoc(fn.__doc__), _arguments_model(name, fn))
        return fn

    return register


def _arguments_model(name: str, fn: Callable[..., str]) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters after ``world``: types and defaults taken from the signature."""
    hints = typing.get_type_hints(fn, include_extras=True)
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].name != "world":
        raise ValueError(f"tool {name}: the first parameter must be `world`")
    fields: dict[str, Any] = {
        p.name: (hints[p.name], ... if p.default is inspect.Parameter.empty else p.default) for p in params[1:]
    }
    return create_model(
        name.replace(".", "_") + "_arguments", __config__=ConfigDict(extra="forbid"), __doc__=None, **fields
    )


def load_apps(*apps: str) -> dict[str, Tool]:
    """Import the modules of ``apps`` (every app when none is named) so that their tools are registered; the
    registry. With every app loaded it is in ``APP_NAMES`` order whatever loaded first: the order is the tool
    listing a model is taught and prompted with."""
    for app in apps or APP_NAMES:
        importlib.import_module(f"envs.apps.{app}")
    if apps:
        return TOOLS
    by_app = sorted(TOOLS.values(), key=_app_rank)  # stable: an app's tools stay in their module's order
    if list(TOOLS) != [tool.name for tool in by_app]:
        TOOLS.clear()
        TOOLS.update((tool.name, tool) for tool in by_app)
    return TOOLS


def _app_rank(tool: Tool) -> int:
    return APP_NAMES.index(tool.app)


def get_tool(name: str) -> Tool:
    if name not in TOOLS and (app := name.partition(".")[0]) in APP_NAMES:
        load_apps(app)
    if name not in TOOLS:
        load_apps()  # the hint names every tool
        close = difflib.get_close_matches(name, TOOLS, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; tools are: {', '.join(sorted(TOOLS))}"
        raise ToolError(f"unknown tool {name!r}{hint}")
    return TOOLS[name]


def tool_schema(name: str) -> dict[str, Any]:
    """The JSON schema of the arguments of tool ``name`` (what an MCP server advertises as its input schema)."""
    schema = get_tool(name).arguments.model_json_schema()
    schema.pop("title", None)
    return schema


def check_encodable(name: str, args: Any) -> None:
    """Refuse a call whose name or arguments cannot travel as UTF-8 JSON: a lone surrogate such as ``"x\\udcff"``
    (what the JSON escape ``\\udcff`` decodes to) is no Unicode text, so every JSON-RPC transport fails to encode it.

    The model wrote it, so it is a ``ToolError`` naming the argument and the character (a corrective observation);
    unchecked, the encoding error closed the gateway's connection and every later call on it failed as infra.
    """
    pending: list[tuple[str, Any]] = [("the tool name", name), ("the arguments", args)]
    while pending:  # a loop, not recursion: arguments may nest deeply
        where, value = pending.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as error:
                raise ToolError(
                    f"{name!a}: {where} holds {value[error.start]!a} at character {error.start}, a lone surrogate "
                    "that is not valid Unicode text; send the text without it"
                ) from None
        elif isinstance(value, dict):
            for key, item in value.items():
                label = f"argument {key!a}" if where == "the arguments" else f"{where} key {key!a}"
                pending += [(f"{where} key {key!a}", key), (label, item)]
        elif isinstance(value, list | tuple):
            pending += [(f"{where} item {index}", item) for index, item in enumerate(value)]


# What XML 1.0 cannot hold (control characters other than tab, newline and return; U+FFFE and U+FFFF): inside a .docx,
# .xlsx or .pptx every text is XML, and lxml / openpyxl refuse these with a bare ValueError deep inside a write.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def check_office_text(argument: str, *texts: str) -> None:
    """Refuse text an office file cannot store with a ``ToolError`` naming the argument and the character (lone
    surrogates never get here: ``check_encodable`` refused them)."""
    for text in texts:
        if found := _NOT_XML.search(text):
            raise ToolError(
                f"argument {argument!r} holds {found.group()!a} at character {found.start()}, a control character "
                "an office file cannot store; send the text without it"
            )


def encodable_text(text: str) -> str:
    """``text`` with every lone surrogate written as an escape (``\\udcff``): what a tool answers (a file name that is
    not UTF-8, a value a model wrote) must survive JSON encoding and the tokenizer."""
    return text.encode("utf-8", errors="backslashreplace").decode("utf-8")


def validate_arguments(name: str, args: Any, model: type[ArgsModel]) -> ArgsModel:
    """``args`` as tool ``name``'s argument model, or a ``ToolError`` the model can read: text that cannot travel
    (``check_encodable``), a missing, extra or wrongly typed argument."""
    check_encodable(name, args)
    try:
        return model.model_validate(args)
    except ValidationError as error:
        raise ToolError(f"{name}: {describe_validation_error(error, model)}") from error


def call_tool(world: World, name: str, args: dict[str, Any]) -> str:
    """Validate ``args`` against tool ``name``'s signature, run it on ``world`` and return its text.

    Raises ToolError for an unknown tool, arguments that are no valid Unicode text (``check_encodable``), missing /
    extra / wrongly typed arguments, a path that leaves the world, an OSError, or any failure the operation itself
    reports.
    """
    spec = get_tool(name)
    if not isinstance(args, dict):
        raise ToolError(f"{name}: arguments must be a JSON object, got {type(args).__name__}")
    validated = validate_arguments(name, args, spec.arguments)
    kwargs = {field: getattr(validated, field) for field in spec.arguments.model_fields}
    try:
        return spec.fn(world, **kwargs)
    except PathEscapeError as error:
        raise ToolError(f"{name}: {error}") from error
    except ValidationError as error:
        raise ToolError(f"{name}: {describe_validation_error(error)}") from error
    except OSError as error:
        raise ToolError(f"{name}: {_describe_os_error(world, error)}") from error


def describe_validation_error(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One phrase per bad argument: "missing argument 'cell'", "argument 'to' item 0: Input should be ...".

    A value that fits no member of a union argument yields one error per member; those collapse into "argument 'value'
    must be str | float | int".
    """
    parts: dict[str, str] = {}
    for item in error.errors():
        loc = item["loc"]
        name = str(loc[0]) if loc else "arguments"
        got = f"(got {item['input']!r:.80})"
        if item["type"] == "missing":
            parts[name] = f"missing argument {name!r}"
        elif item["type"] == "extra_forbidden":
            parts[name] = f"unknown argument {name!r}"
        elif len(loc) > 1 and isinstance(loc[1], int):
            parts.setdefault(name, f"argument {name!r} item {loc[1]}: {item['msg']} {got}")
        elif len(loc) > 1 and model is not None and name in model.model_fields:
            annotation = model.model_fields[name].annotation
            parts[name] = f"argument {name!r} must be {getattr(annotation, '__name__', None) or annotation} {got}"
        else:
            parts.setdefault(name, f"argument {name!r}: {item['msg']} {got}")
    return "; ".join(parts.values())


def _describe_os_error(world: World, error: OSError) -> str:
    """The OS error without the host's absolute paths: paths inside the world are shown relative to ``filesystem/``."""
    message = f"{error.strerror or type(error).__name__}"
    if error.filename:
        message += f": {error.filename}"
    for root in (world.fs_root.resolve(), world.root.resolve()):
        message = message.replace(f"{root}/", "").replace(str(root), ".")
    return message
