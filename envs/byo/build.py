"""Build a team's own environment (``envs.byo.spec``) into the layout every stage reads (``envs.build``).

    build/worlds/<id>/filesystem/        made by the world's ``setup`` command (or copied from its ``folder``)
    build/worlds/<id>/mcp_servers.json   the servers, commands resolved (``ServerSet``): what serves the world's tools
    build/tasks/{train,heldout}.jsonl    the task file's tasks (domain ``general``)
    build/manifest.json                  ``source: file:<environment file>``, counts, content digest

The build lives at ``<data root>/env-byo-<name>-<key>/``; ``key`` digests every file of the environment's folder
and the resolved server commands, so an edit to a task, a setup script or the file gets a new build and two runs of
the same inputs share one (made once under the data root's lock, like the generated worlds).

A server command without a ``/`` is looked up on PATH, then in the folders ``make install-mcp-servers`` fills
(``.venv-mcp/*/bin``, ``.mcp-npm/node_modules/.bin``); a relative path is taken from the environment file's folder. A
command found nowhere is kept as written: de-risk then fails with a finding naming the server.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from envs.build import (
    MARKER,
    EnvironmentBuildError,
    EnvironmentManifest,
    content_digest,
    load_manifest,
    published_build,
)
from envs.byo.spec import (
    SERVERS_FILE,
    EnvironmentFile,
    ServerSet,
    ServerSpec,
    WorldSpec,
    expand,
    load_environment_file,
    load_task_file,
)
from envs.byo.verifiers_env import verifiers_content
from envs.files import atomic_write_text, tree_digest
from envs.loaders import save_jsonl
from envs.sandbox.world_copy import copy_tree
from envs.types import Split, TaskSpec

BYO_BUILD_VERSION = "byo-v3"
"""Part of every build's key: bump it when a build's layout or what the bridge to verifiers reports changes."""
PROJECT_ROOT = Path(__file__).resolve().parents[2]
SERVER_FOLDERS = (PROJECT_ROOT / ".venv-mcp", PROJECT_ROOT / ".mcp-npm" / "node_modules" / ".bin")
"""Where ``make install-mcp-servers`` puts the registries' servers (a venv per PyPI server under the first, the npm
ones in the second): searched after PATH."""
SETUP_OUTPUT_CHARS = 2000


def environment_file_path(path: Path) -> Path:
    return path / "environment.yaml" if path.is_dir() else path


def resolve_command(command: tuple[str, ...], env_dir: Path) -> tuple[str, ...]:
    """``command`` with its program found (PATH, then ``SERVER_FOLDERS``; a relative path from ``env_dir``)."""
    program = command[0]
    if "/" in program:
        found: str | None = str((env_dir / program).resolve()) if not Path(program).is_absolute() else program
    else:
        venvs, npm_bin = SERVER_FOLDERS
        folders = [*sorted(str(bin_dir) for bin_dir in venvs.glob("*/bin")), str(npm_bin)]
        search = os.pathsep.join([os.environ.get("PATH", ""), *folders])
        found = shutil.which(program, path=search)
    return (found or program, *command[1:])


def resolved_servers(spec: EnvironmentFile, env_dir: Path) -> ServerSet:
    """The file's servers as a world carries them: ``{env_dir}`` replaced, each command's program found."""

    def resolved(server: ServerSpec) -> ServerSpec:
        update: dict = {"cwd": expand(server.cwd, env_dir=env_dir), "env": expand(server.env, env_dir=env_dir)}
        if server.command is not None:
            update["command"] = resolve_command(tuple(expand(list(server.command), env_dir=env_dir)), env_dir)
        return server.model_copy(update=update)

    return ServerSet(environment=spec.name, servers=tuple(map(resolved, spec.servers)), probes=spec.probes)


def byo_build_key(env_dir: Path, servers: ServerSet, spec: EnvironmentFile) -> str:
    files = (p for p in env_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    inputs = (
        f"{BYO_BUILD_VERSION}\0{tree_digest(env_dir, files)}\0{servers.model_dump_json()}\0{spec.model_dump_json()}"
    )
    return hashlib.sha256(inputs.encode()).hexdigest()[:16]


def _make_world(world_spec: WorldSpec, filesystem: Path, env_dir: Path) -> None:
    filesystem.mkdir(parents=True)
    if world_spec.folder is not None:
        source = (env_dir / world_spec.folder).resolve()
        if not source.is_dir():
            raise EnvironmentBuildError(f"world {world_spec.id}: folder {source} does not exist")
        copy_tree(source, filesystem)
    if world_spec.setup is None:
        return
    command = [str(part) for part in expand(list(world_spec.setup), filesystem, env_dir, sys.executable)]
    try:
        done = subprocess.run(
            command, cwd=env_dir, capture_output=True, text=True, timeout=world_spec.setup_timeout_s, check=False
        )
    except FileNotFoundError:
        raise EnvironmentBuildError(f"world {world_spec.id}: setup command {command[0]!r} not found") from None
    except subprocess.TimeoutExpired:
        raise EnvironmentBuildError(
            f"world {world_spec.id}: setup did not finish within {world_spec.setup_timeout_s:g} s"
        ) from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout)[-SETUP_OUTPUT_CHARS:]
        raise EnvironmentBuildError(f"world {world_spec.id}: setup exited {done.returncode}: {tail}")


def _generate(
    folder: Path, spec: EnvironmentFile, source: Path, servers: ServerSet, file_tasks: list[TaskSpec] | None
) -> EnvironmentManifest:
    started = time.perf_counter()
    folder = folder.resolve()  # setup commands run in the environment's folder: {world} must not be relative
    env_dir = source.parent
    if spec.verifiers is not None:  # its tasks, and a world per task whose server is the task's toolsets
        content = verifiers_content(spec.name, spec.verifiers, env_dir)
        tasks = content.tasks
        for world_id, server in content.servers.items():
            root = folder / "worlds" / world_id
            (root / "filesystem").mkdir(parents=True)
            own = servers.model_copy(update={"servers": (server,)})
            atomic_write_text(root / SERVERS_FILE, own.model_dump_json(indent=2))
    else:
        assert file_tasks is not None  # the file's validator: servers, worlds and tasks, or verifiers
        tasks = file_tasks
        for world_spec in spec.worlds:
            root = folder / "worlds" / world_spec.id
            _make_world(world_spec, root / "filesystem", env_dir)
            atomic_write_text(root / SERVERS_FILE, servers.model_dump_json(indent=2))
    for split in Split:
        save_jsonl([task for task in tasks if task.split is split], folder / "tasks" / f"{split}.jsonl")
    counts = Counter(f"{task.domain}/{task.tier}/{task.split}" for task in tasks)
    manifest = EnvironmentManifest(
        seed=0,
        world_ids=sorted(world.name for world in (folder / "worlds").iterdir()),
        task_counts=dict(sorted(counts.items())),
        content_digest=content_digest(folder),
        generation_seconds=round(time.perf_counter() - started, 3),
        source=f"file:{source}",
    )
    atomic_write_text(folder / "manifest.json", manifest.model_dump_json(indent=2))
    (folder / MARKER).touch()
    return manifest


def _intact(folder: Path, source: Path) -> bool:
    manifest = load_manifest(folder)
    return (
        manifest is not None
        and manifest.source == f"file:{source}"
        and content_digest(folder) == manifest.content_digest
    )


def byo_environment_build(path: Path, root: Path) -> Path:
    """The build of the environment file ``path`` (or a folder holding ``environment.yaml``) under the data root."""
    source = environment_file_path(path).resolve()
    spec = load_environment_file(source)
    # Read before taking the lock: a bad line costs one message, not a build.
    tasks = load_task_file(source.parent / spec.tasks, spec.name, {w.id for w in spec.worlds}) if spec.tasks else None
    servers = resolved_servers(spec, source.parent)
    name = f"env-byo-{spec.name}-{byo_build_key(source.parent, servers, spec)}"
    return published_build(
        root,
        name,
        lambda folder: _generate(folder, spec, source, servers, tasks),
        lambda folder: _intact(folder, source),
    )
