"""The environment file: a team's own MCP servers, the worlds they work on, and tasks over them (YAML).

A minimal one (the full example: ``examples/environments/git-history/environment.yaml``)::

    name: my-repos                           # lowercase letters, digits and hyphens
    servers:
      - name: git                            # lowercase letters and digits (tools are offered as git_<tool>)
        command: [mcp-server-git]            # on PATH, installed by make install-mcp-servers, or a path from here
        tools: [git_status, git_log]         # the tools the model sees (default: all the server lists)
        timeout_s: 20                        # per call (default 30; start_timeout_s too)
        secrets: {GITHUB_TOKEN: MY_TOKEN}    # server variable <- host variable, read when the server starts
    worlds:
      - id: repo-1
        setup: ["{python}", make_repo.py, "{world}"]   # run once at build time, in this file's folder
    tasks: tasks.jsonl
    probes:
      arguments: {repo_path: "."}            # schema probes' arguments, by name
      calls:
        - {tool: git_log, args: {repo_path: ".", max_count: 1}, expect: "Author:"}

Placeholders: ``{world}`` is a world's ``filesystem/`` folder — the new one in ``setup``, the rollout's private copy in
a server's ``command``, ``cwd``, ``env`` and in probe arguments; ``{env_dir}`` this file's folder (``setup`` and the
servers' ``command``, ``cwd`` and ``env``); ``{python}`` rl-recipe's own interpreter (``setup``). Probe calls the
local base is taught (``trainer.probe_examples``) must not use ``{world}`` — a model cannot know its copy's path —
so write paths relative to the server's folder (``cwd``, the world copy by default). A server is a stdio ``command``
(started per rollout inside the sandbox, on the world copy) or a loopback ``url`` (streamable HTTP, shared; per-call
timeouts apply the same). Secrets are never written in the file: ``secrets`` names host variables.

Task file (JSONL, one task per line)::

    {"id": "latest-author-1", "world": "repo-1", "split": "heldout", "prompt": "Who wrote the latest commit?",
     "rubric": [{"kind": "answer_contains_all", "items": ["Grace Hopper"]}]}

``split`` defaults to ``train`` (both splits are needed), ``tier`` to ``toy``; ``rubric`` takes the project's criteria
(``envs.types.Criterion``: ``answer_equals`` ``expected``, ``answer_numeric`` ``expected``, ``answer_contains_all``
``items``, ``file_exists`` ``path``, …; ``llm_judge`` on held-out tasks only); ``oracle`` is optional (steps name tools
as ``<server>.<tool>``). Bad input raises ``EnvironmentFileError`` naming the file, the line and the field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from envs.errors import RecipeError
from envs.jsonio import JsonError, json_lines, parse_json
from envs.types import Criterion, Domain, Oracle, Split, TaskSpec, Tier

SERVERS_FILE = "mcp_servers.json"
"""In a built world folder (beside ``filesystem/``): the servers the world's tools come from (``ServerSet``)."""
WORLD_PLACEHOLDER = "{world}"
ENV_DIR_PLACEHOLDER = "{env_dir}"
PYTHON_PLACEHOLDER = "{python}"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
OWN_ENVIRONMENT = "team_environment"
"""The metadata key naming a team's task's environment (``TaskSpec.metadata``; Harbor tasks use ``environment``)."""


class EnvironmentFileError(RecipeError, ValueError):
    """An environment or task file that cannot be used: the message names the file, where, and why."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSpec(_Spec):
    """One MCP server: a stdio ``command`` started per rollout, or a loopback ``url``."""

    name: str = Field(pattern=r"^[a-z][a-z0-9]*$", max_length=24)
    """Tools are offered as ``<name>_<tool>`` (letters and digits only, so the name splits off again)."""
    command: tuple[str, ...] | None = Field(None, min_length=1)
    url: str | None = None
    cwd: str = WORLD_PLACEHOLDER
    env: dict[str, str] = Field(default_factory=dict)
    """Plain settings passed to the server; secrets go in ``secrets``."""
    secrets: dict[str, str] = Field(default_factory=dict)
    """Server variable -> host variable holding the value (read when the server starts, never stored)."""
    tools: tuple[str, ...] | None = None
    """The server's tools the model is offered (default: every tool it lists)."""
    timeout_s: float = Field(30.0, gt=0, le=3600)
    start_timeout_s: float = Field(30.0, gt=0, le=600)

    @model_validator(mode="after")
    def _one_transport(self) -> ServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"server {self.name}: give exactly one of command (stdio) or url (streamable HTTP)")
        if self.url is not None and urlparse(self.url).hostname not in LOOPBACK_HOSTS:
            raise ValueError(f"server {self.name}: url {self.url} is not on loopback (127.0.0.1, localhost, ::1)")
        for key in self.env:
            if re.search(r"token|secret|password|api_?key", key, re.IGNORECASE):
                raise ValueError(
                    f"server {self.name}: env {key} looks like a secret: name its host variable in secrets"
                )
        return self


class UserProbe(_Spec):
    """A call known to succeed on every world: ``tool`` as ``<server>.<tool>``, or the bare tool name when the file
    has one server."""

    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    expect: str | None = None
    """A substring the answer must contain."""

    def offered(self, servers: tuple[ServerSpec, ...]) -> str:
        """The name the tool is offered under (``git_git_log``)."""
        server, dot, tool = self.tool.rpartition(".")
        if not dot:
            if len(servers) != 1:
                raise ValueError(f"probe {self.tool}: name its server (<server>.<tool>): the file has several")
            server, tool = servers[0].name, self.tool
        if server not in {s.name for s in servers}:
            raise ValueError(f"probe {self.tool}: no server named {server!r}")
        return f"{server}_{tool}"


class ProbeSpec(_Spec):
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Values for schema probes' arguments, by argument name."""
    calls: tuple[UserProbe, ...] = ()


class WorldSpec(_Spec):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    setup: tuple[str, ...] | None = Field(None, min_length=1)
    """A command run once at build time in this file's folder, ``{world}`` the new world's folder (e.g. a script that
    makes a repository there); a world with neither ``setup`` nor ``folder`` starts empty (an HTTP server's, say)."""
    folder: str | None = None
    """Or a folder (relative to the environment file) copied as the world."""
    setup_timeout_s: float = Field(300.0, gt=0, le=86400)

    @model_validator(mode="after")
    def _one_source(self) -> WorldSpec:
        if self.setup is not None and self.folder is not None:
            raise ValueError(f"world {self.id}: give setup or folder, not both")
        return self


class VerifiersSpec(_Spec):
    """A ``verifiers`` environment (Prime Intellect's format): its tasks, toolsets and rewards, run through rl-recipe's
    harness (``envs.byo.verifiers_env``)."""

    id: str = Field(min_length=1)
    """The taskset id verifiers loads (``owner/name@version`` or ``my-tasks``: the module ``my_tasks``)."""
    path: str | None = None
    """A folder holding the module, relative to the environment file (default: installed in the verifiers venv)."""
    python: str | None = None
    """The Python of the verifiers venv (default: the one ``make install-mcp-servers`` makes)."""
    heldout_every: int = Field(4, ge=2, le=1000)
    """Every n-th task is held out (verifiers tasksets have no splits)."""
    timeout_s: float = Field(60.0, gt=0, le=3600)
    """For loading the tasks, and for each scoring and tool call."""


VERIFIERS_SERVER = ServerSpec(name="vf", command=("verifiers",))
"""The server a verifiers environment's toolsets are offered by (``vf_<toolset>_<tool>``)."""


class EnvironmentFile(_Spec):
    """Servers, worlds and a task file; or a ``verifiers`` environment, which brings all three."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = ""
    servers: tuple[ServerSpec, ...] = ()
    worlds: tuple[WorldSpec, ...] = ()
    tasks: str | None = None
    """The task file, relative to the environment file."""
    verifiers: VerifiersSpec | None = None
    probes: ProbeSpec = ProbeSpec()

    @model_validator(mode="after")
    def _one_source(self) -> EnvironmentFile:
        if self.verifiers is not None and (self.servers or self.worlds or self.tasks):
            raise ValueError("a verifiers environment brings its own servers, worlds and tasks: give none of them")
        if self.verifiers is None and not (self.servers and self.worlds and self.tasks):
            raise ValueError("give servers, worlds and tasks (or a verifiers environment)")
        for what, names in (("server", [s.name for s in self.servers]), ("world", [w.id for w in self.worlds])):
            if duplicates := sorted({n for n in names if names.count(n) > 1}):
                raise ValueError(f"{what} names repeat: {', '.join(duplicates)}")
        for probe in self.probes.calls:
            probe.offered(self.servers or (VERIFIERS_SERVER,))
        return self


class ServerSet(_Spec):
    """What a built world carries: its servers with commands resolved, and the probes de-risk sends
    (``SERVERS_FILE``)."""

    environment: str
    servers: tuple[ServerSpec, ...]
    probes: ProbeSpec = ProbeSpec()


class TaskRow(_Spec):
    """One line of a task file."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    world: str
    prompt: str = Field(min_length=1)
    rubric: list[Criterion] = Field(min_length=1)
    split: Split = Split.TRAIN
    tier: Tier = Tier.TOY
    oracle: Oracle | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def task(self, environment: str) -> TaskSpec:
        metadata = self.metadata | {OWN_ENVIRONMENT: environment}
        return TaskSpec(
            task_id=self.id, world_id=self.world, domain=Domain.GENERAL, tier=self.tier, split=self.split,
            prompt=self.prompt, rubric=self.rubric, oracle=self.oracle, metadata=metadata,
        )  # fmt: skip


def _errors(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or 'file'}: {item['msg']}" for item in error.errors()
    )


def load_environment_file(path: Path) -> EnvironmentFile:
    """The environment file at ``path`` (a YAML file, or a folder holding ``environment.yaml``), validated."""
    path = path / "environment.yaml" if path.is_dir() else path
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise EnvironmentFileError(f"{path}: cannot read the environment file: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise EnvironmentFileError(f"{path}: not YAML: {error}") from None
    if not isinstance(raw, dict):
        raise EnvironmentFileError(f"{path}: an environment file is a mapping (name, servers, worlds, tasks)")
    try:
        spec = EnvironmentFile.model_validate(raw)
    except ValidationError as error:
        raise EnvironmentFileError(f"{path}: {_errors(error)}") from None
    return spec


def load_task_file(path: Path, environment: str, world_ids: set[str]) -> list[TaskSpec]:
    """Every task of the JSONL task file ``path``; all or nothing, each bad line named."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise EnvironmentFileError(f"{path}: cannot read the task file: {error.strerror or error}") from None
    tasks: list[TaskSpec] = []
    for number, line in json_lines(text):
        where = f"{path}, line {number}"
        try:
            row = TaskRow.model_validate(parse_json(line))
        except JsonError as error:
            raise EnvironmentFileError(f"{where}: not JSON: {error}") from None
        except ValidationError as error:
            raise EnvironmentFileError(f"{where}: {_errors(error)}") from None
        if row.split is Split.TRAIN and any(criterion.kind == "llm_judge" for criterion in row.rubric):
            raise EnvironmentFileError(
                f"{where}: a train task cannot have an llm_judge criterion: training and de-risk rollouts are graded "
                "without a judge (give it answer or file checks; a held-out task's llm_judge is graded by the "
                "profile's judge in the evals)"
            )
        if row.world not in world_ids:
            raise EnvironmentFileError(
                f"{where}: world {row.world!r} is not one of the file's worlds {sorted(world_ids)}"
            )
        tasks.append(row.task(environment))
    ids = [task.task_id for task in tasks]
    if duplicates := sorted({i for i in ids if ids.count(i) > 1}):
        raise EnvironmentFileError(f"{path}: task ids repeat: {', '.join(duplicates)}")
    if not tasks:
        raise EnvironmentFileError(f"{path}: no task in the file")
    missing = [split for split in Split if not any(task.split is split for task in tasks)]
    if missing:
        raise EnvironmentFileError(f"{path}: no {missing[0]} task: the chain trains on train and reports on heldout")
    return tasks


def expand(value: Any, world: Path | None = None, env_dir: Path | None = None, python: str | None = None) -> Any:
    """``value`` with the given placeholders replaced (``{world}``, ``{env_dir}``, ``{python}``; the others left as
    written), in strings, lists and mappings."""
    if isinstance(value, str):
        for placeholder, text in (
            (WORLD_PLACEHOLDER, world),
            (ENV_DIR_PLACEHOLDER, env_dir),
            (PYTHON_PLACEHOLDER, python),
        ):
            if text is not None:
                value = value.replace(placeholder, str(text))
        return value
    if isinstance(value, list | tuple):
        return [expand(item, world, env_dir, python) for item in value]
    if isinstance(value, dict):
        return {key: expand(item, world, env_dir, python) for key, item in value.items()}
    return value


def server_set_of(world_root: Path) -> ServerSet | None:
    """The servers a built world's tools come from; None for the project's own worlds (their apps serve them)."""
    path = world_root / SERVERS_FILE
    if not path.is_file():
        return None
    return ServerSet.model_validate_json(path.read_text(encoding="utf-8"))
