"""The run store: one folder per pipeline run, holding everything a later reader needs to audit it.

Layout (docs/architecture.md, step 11)::

    runs/<run_id>/
        run.json                 RunInfo: profile, config (JSON), config hash, code version, host, resumes
        catalog.duckdb           trajectories, turns, tool calls, train steps, evals, gates (``tasks.catalog``)
        pruned.json              checkpoints ``recipe prune`` removed, when (``tasks.prune``); absent until then
        <n>-<stage>/manifest.json  StageManifest: status, fingerprint, inputs, outputs, metrics, gate, timings
        <n>-<stage>/...          what the stage wrote: gate.md, plots, checkpoints, outputs named in the manifest

Every file is written atomically (``envs.files``) and read back through ``envs.jsonio.parse_json``: a damaged or
hostile file (bad syntax, nesting 200 000 levels deep, a 5000-digit integer) is a ``RunStoreError`` naming it. The
store is generic JSON: it knows stage folder names but not the config's or the gate's types, which live in ``flows``
(tasks never import flows). A stage whose manifest says ``passed`` with the fingerprint the current config gives is
reused on resume instead of run again. A run id is one plain folder name (``check_run_id``).

    store = RunStore.create(Path("runs"), "local", config_json)
    store.write_manifest(StageManifest(stage="derisk", folder="1-derisk", status=StageStatus.RUNNING, ...))
    RunStore.open(Path("runs"), store.run_id).manifest("1-derisk")
"""

from __future__ import annotations

import platform
import re
import secrets
import subprocess
import time
from datetime import UTC, datetime
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.errors import RecipeError
from envs.files import atomic_write_text
from envs.jsonio import JsonError, parse_json

M = TypeVar("M", bound="BaseModel")

RUN_FILE = "run.json"
MANIFEST_FILE = "manifest.json"
CATALOG_FILE = "catalog.duckdb"
GIT_TIMEOUT_S = 10.0
SOURCE_ROOT = Path(__file__).resolve().parent.parent
MAX_RUN_ID = 128
RUN_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_RUN_ID - 1}}}")
"""A run id is one folder name: no path separators, no ``..``, short enough for every file system and log line."""
STAGE_FOLDER = re.compile(r"(\d{1,3})-[^/]+")
"""``<index>-<stage>`` (``4-overfit``): the folders a run's manifests live in."""


class RunStoreError(RecipeError, ValueError):
    """A run folder that is missing or damaged; the message names the file."""


class StageStatus(StrEnum):
    RUNNING = "running"
    PASSED = "passed"
    GATE_FAILED = "gate_failed"  # ran to the end, the gate did not hold
    ERROR = "error"  # raised (a bug or an input to fix)
    SKIPPED = "skipped"  # an earlier stage did not pass


class CodeVersion(BaseModel):
    model_config = ConfigDict(frozen=True)

    commit: str | None
    """git HEAD of the checkout (None outside a git checkout)."""
    dirty: bool
    """Uncommitted changes to tracked files at run time."""
    package: str

    @property
    def label(self) -> str:
        """The commit as reports show it: its first 10 characters, ``+dirty`` with uncommitted changes."""
        if self.commit is None:
            return "unknown"
        return self.commit[:10] + ("+dirty" if self.dirty else "")


def _git(*args: str, cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_version(source: Path = SOURCE_ROOT) -> CodeVersion:
    """The commit and dirty flag of the checkout the code runs from (provenance in every manifest)."""
    commit = _git("rev-parse", "HEAD", cwd=source)
    status = _git("status", "--porcelain", "--untracked-files=no", cwd=source) if commit else None
    try:
        package = metadata.version("rl-recipe")
    except metadata.PackageNotFoundError:
        package = "unknown"
    return CodeVersion(commit=commit, dirty=bool(status), package=package)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ConfigChange(BaseModel):
    at: str
    config_hash: str
    reason: str


class RunInfo(BaseModel):
    run_id: str
    profile: str
    created_at: str
    config: dict[str, Any]
    config_hash: str
    code_version: CodeVersion
    host: str = Field(default_factory=platform.node)
    python: str = Field(default_factory=platform.python_version)
    history: list[ConfigChange] = Field(default_factory=list)
    """Config changes on resume (e.g. a threshold fixed), oldest first."""


class StageManifest(BaseModel):
    """One stage's record; rewritten as it starts and when it ends."""

    stage: str
    folder: str
    status: StageStatus
    fingerprint: str = ""
    """Hash of what the stage depends on (its config sections and the earlier stages' fingerprints)."""
    config_hash: str = ""
    code_version: CodeVersion | None = None
    attempt: int = 1
    started_at: str | None = None
    finished_at: str | None = None
    duration_s: float | None = None
    inputs: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)
    """Name → path (relative to the run folder) or small JSON value, for the next stages and the audit."""
    metrics: dict[str, Any] = Field(default_factory=dict)
    gate: dict[str, Any] | None = None
    """The stage's gate report (``flows.gates.GateReport`` as JSON)."""
    timings: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    jobs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Jobs the stage submitted to a cluster, by work folder (``tasks.cluster.JobRecord``): what a resumed stage
    reattaches to."""

    def tables(self) -> dict[str, list[dict[str, Any]]]:
        """The metrics that are tables (a list of row mappings: ablation arms, transfer suites), by name: what the
        explorer, the report and a comparison show as tables rather than as one value."""
        return {
            name: value
            for name, value in self.metrics.items()
            if isinstance(value, list) and value and all(isinstance(row, dict) for row in value)
        }


def new_run_id(profile: str) -> str:
    return f"{profile}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    """``run_id`` when it can name a run folder (``RUN_ID``); a ``RunStoreError`` otherwise, quoting at most the start
    of a long one so the error stays one readable line."""
    if RUN_ID.fullmatch(run_id):
        return run_id
    shown = f"{run_id[:40]!r}… ({len(run_id)} characters)" if len(run_id) > 60 else repr(run_id)
    raise RunStoreError(
        f"{shown} is not a run id: at most {MAX_RUN_ID} letters, digits, '.', '_' or '-', starting with a letter or "
        "digit (a run folder named otherwise: give its path)"
    )


def _holds_run(root: Path) -> bool:
    """Whether ``root`` is a run folder; a path the OS refuses to look at (a name too long) is none."""
    try:
        return (root / RUN_FILE).is_file()
    except OSError:
        return False


class RunStore:
    """One run folder; see the module docstring."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_FILE

    @classmethod
    def create(
        cls, runs_root: Path, profile: str, config: dict[str, Any], config_hash: str, run_id: str | None = None
    ) -> RunStore:
        """A new run folder with its ``run.json`` (``run_id`` defaults to ``<profile>-<time>-<random>``; either must
        pass ``check_run_id``, so the folder lands under ``runs_root`` and nowhere else)."""
        store = cls(runs_root / check_run_id(run_id or new_run_id(profile)))
        if (store.root / RUN_FILE).exists():
            raise RunStoreError(f"{store.root} already holds a run; resume it (recipe run --resume {store.run_id})")
        info = RunInfo(
            run_id=store.run_id,
            profile=profile,
            created_at=now(),
            config=config,
            config_hash=config_hash,
            code_version=code_version(),
        )
        store.write_info(info)
        return store

    @classmethod
    def open(cls, runs_root: Path, run: str) -> RunStore:
        """An existing run by id (under ``runs_root``) or by path; a bare name (no separator) must be a run id."""
        if "/" not in run and run not in (".", ".."):
            check_run_id(run)
        candidates = [Path(run), runs_root / run]
        for root in candidates:
            if _holds_run(root):
                return cls(root)
        raise RunStoreError(f"no run {run!r}: neither {candidates[0]} nor {candidates[1]} holds a {RUN_FILE}")

    @classmethod
    def exists(cls, runs_root: Path, run: str) -> bool:
        return _holds_run(runs_root / run) or _holds_run(Path(run))

    def info(self) -> RunInfo:
        return read_model(self.root / RUN_FILE, RunInfo)

    def verify(self) -> None:
        """Read ``run.json`` and every manifest, so a damaged one fails now (``RunStoreError`` naming it) rather than
        after a command has started a flow or a server on the run."""
        self.info()
        self.manifests()

    def write_info(self, info: RunInfo) -> None:
        atomic_write_text(self.root / RUN_FILE, info.model_dump_json(indent=2) + "\n")

    def update_config(self, config: dict[str, Any], config_hash: str, reason: str) -> RunInfo:
        """Record a config change made on resume; a no-op when the hash is unchanged."""
        info = self.info()
        if info.config_hash == config_hash:
            return info
        change = ConfigChange(at=now(), config_hash=config_hash, reason=reason)
        updated = info.model_copy(
            update={"config": config, "config_hash": config_hash, "history": [*info.history, change]}
        )
        self.write_info(updated)
        return updated

    def stage_dir(self, folder: str) -> Path:
        path = self.root / folder
        path.mkdir(parents=True, exist_ok=True)
        return path

    def manifest(self, folder: str) -> StageManifest | None:
        path = self.root / folder / MANIFEST_FILE
        return read_model(path, StageManifest) if path.is_file() else None

    def write_manifest(self, manifest: StageManifest) -> None:
        atomic_write_text(self.stage_dir(manifest.folder) / MANIFEST_FILE, manifest.model_dump_json(indent=2) + "\n")

    def manifests(self) -> list[StageManifest]:
        """Every stage manifest, in stage order (``STAGE_FOLDER`` names start with the stage's index). A manifest in any
        other folder is refused, naming it: which stage it records cannot be told, and skipping it could hide one."""
        found = []
        for path in self.root.glob(f"*/{MANIFEST_FILE}"):
            folder = STAGE_FOLDER.fullmatch(path.parent.name)
            if folder is None:
                raise RunStoreError(f"{path} is not in a stage folder (<index>-<stage>, e.g. 1-derisk): move it away")
            found.append((int(folder[1]), path))
        return [read_model(path, StageManifest) for _, path in sorted(found)]

    def relative(self, path: Path) -> str:
        """``path`` relative to the run folder (manifests store relative paths, so a run folder can move); a path
        outside it (shared storage on a cluster) stays absolute."""
        resolved = Path(path).resolve()
        return (
            str(resolved.relative_to(self.root.resolve()))
            if resolved.is_relative_to(self.root.resolve())
            else str(resolved)
        )

    def path(self, relative: str) -> Path:
        return self.root / relative


def eval_folder_stem(suite: str, label: str) -> str:
    """``eval-<suite>-<label>``: the name of a stage eval's work folder before its key (``StageRun.work_dir`` adds
    ``-<key>``); ``eval_folder_parts`` reads it back. A suite holds no hyphen: the label starts at the first one."""
    if "-" in suite:
        raise ValueError(f"an eval suite's name holds no hyphen (the folder name could not be read back): {suite!r}")
    return f"eval-{suite}-{label}"


def eval_folder_parts(name: str) -> tuple[str, str] | None:
    """(suite, label) of a stage eval's work folder ``eval-<suite>-<label>-<key>``; None for any other name."""
    stem, _, key = name.rpartition("-")
    suite, _, label = stem.removeprefix("eval-").partition("-")
    return (suite, label) if name.startswith("eval-") and key and suite and label else None


def train_folder_stem(label: str) -> str:
    """``train-<label>``: the name of a stage's training work folder before its key (``StageRun.work_dir`` adds
    ``-<key>``); ``train_folder_label`` reads it back."""
    return f"train-{label}"


def train_folder_label(name: str) -> str | None:
    """The loop label of a training work folder ``train-<label>-<key>``; None for any other name."""
    stem, _, key = name.rpartition("-")
    label = stem.removeprefix("train-")
    return label if name.startswith("train-") and key and label else None


def read_model(path: Path, model: type[M]) -> M:
    """The JSON record at ``path`` as ``model``, read through the safe parser; a ``RunStoreError`` naming the file
    when it is missing, unreadable, not JSON or not that record (any record of a run folder: ``pruned.json`` too)."""
    try:
        return model.model_validate(parse_json(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise RunStoreError(f"{path} is missing") from None
    except OSError as error:  # a folder where the file should be, no permission
        raise RunStoreError(f"cannot read {path}: {error.strerror}") from None
    except (JsonError, UnicodeDecodeError) as error:
        raise RunStoreError(f"{path} is not valid JSON: {error}") from None
    except ValidationError as error:
        raise RunStoreError(f"{path} is not a {model.__name__}: {error.errors()[0]['msg']}") from None


def all_runs(runs_root: Path) -> list[tuple[RunInfo, RunStore]]:
    """Every run folder under ``runs_root`` with its ``run.json``, oldest first (a damaged one is skipped)."""
    found = []
    for path in sorted(runs_root.glob(f"*/{RUN_FILE}")):
        try:
            found.append((read_model(path, RunInfo), RunStore(path.parent)))
        except RunStoreError:
            continue
    return sorted(found, key=lambda pair: pair[0].created_at)


def runs_of(runs_root: Path, profile: str) -> list[RunStore]:
    """Every run folder of ``profile`` under ``runs_root``, oldest first (a damaged one is skipped)."""
    return [store for info, store in all_runs(runs_root) if info.profile == profile]
