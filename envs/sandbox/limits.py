"""Resource limits and isolation for the code an agent runs (``code_exec``), configured once through the environment.

``ResourceLimits`` travels as JSON in ``RL_RECIPE_SANDBOX_LIMITS``: the sandbox provider sets it on the gateway
subprocess, and ``envs.apps.code_exec.run_limited`` reads it for every launch, so every process the gateway starts
inherits the same limits. Two layers apply them:

- rlimits, set in the child between fork and exec (``preexec``): ``RLIMIT_CPU`` (CPU seconds; SIGXCPU at the soft
  limit, SIGKILL one second later), ``RLIMIT_AS`` (address space: allocations beyond it fail, Python raises
  MemoryError), ``RLIMIT_FSIZE`` (largest file written: EFBIG, or SIGXFSZ for programs that do not ignore it),
  ``RLIMIT_NPROC`` (processes of the user: ``fork`` fails with EAGAIN);
- bubblewrap (``bwrap``), when on PATH and able to create namespaces: no network, a private ``/tmp``, only what the
  interpreter needs of the host (system programs and libraries, the venv, the app CLI's sources; read-only), the
  working folder and the launch's scratch folder (HOME, TMPDIR) as the only host paths it can write, and, when we are
  root, the unprivileged user ``nobody`` with no capabilities. Without bwrap a one-time warning is logged and only the
  rlimits and the apps' own path checks hold.

Example::

    limits = ResourceLimits(cpu_s=10, memory_mb=1024)
    env = limits.to_env()   # set on the gateway subprocess: each code_exec launch in it reads (and passes on) them
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

LIMITS_ENV = "RL_RECIPE_SANDBOX_LIMITS"
PROBE_TIMEOUT_S = 5.0
_MIB = 1024 * 1024

log = logging.getLogger(__name__)


class Isolation(StrEnum):
    """How code is isolated: ``auto`` uses bubblewrap when it works here, ``bwrap`` requires it, ``none`` skips it."""

    AUTO = "auto"
    BWRAP = "bwrap"
    NONE = "none"


class ResourceLimits(BaseModel):
    """The limits of one code_exec launch (each process of it; NPROC counts the processes of the sandbox user)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_s: int = Field(default=120, gt=0, description="CPU seconds per process (RLIMIT_CPU)")
    memory_mb: int = Field(default=4096, gt=0, description="address space per process in MiB (RLIMIT_AS)")
    file_size_mb: int = Field(default=512, gt=0, description="largest file a process may write, MiB (RLIMIT_FSIZE)")
    max_processes: int = Field(default=256, gt=0, description="processes the launch may add (RLIMIT_NPROC)")
    wall_s: float = Field(default=600.0, gt=0, description="wall-clock cap over any requested timeout")
    isolation: Isolation = Isolation.AUTO

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ResourceLimits:
        """The limits in ``environ[LIMITS_ENV]`` (JSON), or the defaults when it is unset or empty."""
        raw = environ.get(LIMITS_ENV, "").strip()
        return _parse(raw) if raw else cls()

    def to_env(self) -> dict[str, str]:
        """The environment entry that makes a subprocess (and everything it launches) use these limits."""
        return {LIMITS_ENV: self.model_dump_json()}


@functools.cache
def _parse(raw: str) -> ResourceLimits:
    try:
        return ResourceLimits.model_validate_json(raw)
    except ValidationError as error:
        raise ValueError(f"bad ${LIMITS_ENV} ({raw!r:.200}): {error}") from error


# --- rlimits ----------------------------------------------------------------------------------------------------------

RlimitValues = list[tuple[int, int, int]]  # (resource, soft, hard)


def rlimit_values(limits: ResourceLimits, uid: int, user_processes: int) -> RlimitValues:
    """The (resource, soft, hard) triples for ``limits``.

    RLIMIT_NPROC counts every process of the real user, not only the launch's, so for an ordinary user the cap is
    ``user_processes + max_processes`` (what already runs plus what the launch may add). The kernel never enforces it
    for uid 0, so for root it is just ``max_processes`` (a warning says so; see ``warn_if_root``).
    """
    nproc = limits.max_processes + (user_processes if uid != 0 else 0)
    return [
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 1),  # soft: SIGXCPU (catchable); hard: SIGKILL
        (resource.RLIMIT_AS, limits.memory_mb * _MIB, limits.memory_mb * _MIB),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * _MIB, limits.file_size_mb * _MIB),
        (resource.RLIMIT_NPROC, nproc, nproc),
    ]


def _clamp(value: int, ceiling: int) -> int:
    """``value`` no higher than the current hard limit ``ceiling`` (an unprivileged process cannot raise it)."""
    return value if ceiling == resource.RLIM_INFINITY else min(value, ceiling)


def count_user_processes(uid: int, proc: Path = Path("/proc")) -> int:
    """How many processes ``uid`` owns now (the owner of ``/proc/<pid>``), 0 where /proc is unavailable."""
    count = 0
    for entry in proc.iterdir() if proc.is_dir() else ():
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except FileNotFoundError:  # the process exited while we looked
                continue
    return count


def preexec(limits: ResourceLimits) -> Callable[[], None]:
    """A ``preexec_fn`` applying ``limits`` in the child: the values are computed here, in the parent, so that the
    child (between fork and exec, where little is safe) only makes ``setrlimit`` calls."""
    uid = os.getuid()
    values = [
        (res, _clamp(soft, hard_now), _clamp(hard, hard_now))
        for res, soft, hard in rlimit_values(limits, uid, count_user_processes(uid) if uid else 0)
        for hard_now in [resource.getrlimit(res)[1]]
    ]
    warn_if_root(uid)

    def apply() -> None:
        for res, soft, hard in values:
            resource.setrlimit(res, (soft, hard))

    return apply


@functools.cache
def warn_if_root(uid: int) -> None:
    if uid == 0:
        log.warning(
            "sandboxed code is launched by root: under bubblewrap it runs without capabilities (as nobody where user "
            "namespaces work), but the kernel still counts its processes as root's and never enforces RLIMIT_NPROC "
            "for them, so a fork bomb is only stopped by the wall-clock kill; run the sandbox as an unprivileged user"
        )


# --- bubblewrap -------------------------------------------------------------------------------------------------------

SANDBOX_UID = 65534
"""``nobody``: the user sandboxed code runs as when we are root (see ``bwrap_argv``)."""
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""The system's programs and libraries, read-only (a merged-/usr system's ``/bin -> usr/bin`` stays a symlink)."""
SYSTEM_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",  # /usr/bin/awk -> /etc/alternatives/awk -> /usr/bin/mawk
    "/etc/localtime",
    "/etc/timezone",
    "/etc/nsswitch.conf",
    "/etc/passwd",  # names only (the hashes live in /etc/shadow, never bound)
    "/etc/group",
    "/etc/mime.types",
    "/etc/locale.alias",
    "/etc/fonts",
)
"""The few files of /etc that programs read to start (the dynamic loader's cache, the alternatives, the time zone)."""
APP_CLI_SOURCES = (
    "envs/__init__.py",
    "envs/errors.py",
    "envs/files.py",
    "envs/jsonio.py",
    "envs/options.py",
    "envs/paths.py",
    "envs/scratch.py",
    "envs/apps",
    "envs/sandbox/__init__.py",
    "envs/sandbox/limits.py",
)
"""The project's sources ``python -m envs.apps`` imports (the code-only harness's oracle runs it inside the sandbox):
nothing else of the checkout (its data, held-out tasks, task generators, graders, terminal tasks' tests and solutions)
is visible."""
HIDDEN_PACKAGE_DIRS = ("terminal_tasks", "taskgen")
"""Folders of the ``envs`` package covered by an empty tmpfs when an installed ``envs`` lies inside a bound runtime
folder (a non-editable install in the venv): the terminal tasks' ``tests/`` and ``solution/``, the task generators."""


@dataclass(frozen=True)
class Mount:
    """A host folder seen at another path inside the sandbox: a Harbor task's ``/app``, ``/tests``, ``/solution``
    and ``/logs/verifier`` are folders of its sandbox on the host (``envs.harness.harbor``)."""

    source: Path
    target: str
    writable: bool = True


def bwrap_argv(
    bwrap: str, argv: Sequence[str], cwd: Path, writable: Sequence[Path], mounts: Sequence[Mount] = ()
) -> list[str]:
    """``argv`` under bubblewrap, seeing only what it needs: every namespace unshared (no network), an empty root with
    the system's programs and libraries (``SYSTEM_DIRS``, a few ``SYSTEM_ETC`` files), this interpreter and its venv,
    the app CLI's sources (``APP_CLI_SOURCES``), all read-only; a private /tmp, /dev and /proc; and each ``writable``
    folder bound read-write, then each of ``mounts`` at its target path (a Harbor task's ``/app``). Nothing else of
    the host exists inside: not the checkout (held-out tasks), not /etc/shadow, not /root, not a terminal task's
    ``tests/`` or ``solution/``.

    Every capability is dropped, so the code cannot undo the mounts that hide the host; run as root, the code also
    runs as ``nobody`` (``SANDBOX_UID``) in a user namespace, where the kernel allows one (``_user_namespace_works``).
    (The kernel still counts its processes as root's: RLIMIT_NPROC needs a non-root host user, see
    ``warn_if_root``.) The order matters: later mounts cover earlier ones, so the world is bound after the
    tmpfs on /tmp (worlds often live under /tmp).
    """
    system: list[str] = []
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            system += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            system += ["--ro-bind", folder, folder]
    system += [arg for path in SYSTEM_ETC if os.path.exists(path) for arg in ("--ro-bind", path, path)]
    runtime = [arg for path in _runtime_roots() for arg in ("--ro-bind", path, path)]
    sources = [arg for path in _app_cli_sources() for arg in ("--ro-bind", path, path)]
    hidden = [arg for path in _hidden_package_dirs() for arg in ("--tmpfs", path)]
    binds = [arg for path in writable for arg in ("--bind", str(path.resolve()), str(path.resolve()))]
    binds += [
        arg
        for mount in mounts
        for arg in ("--bind" if mount.writable else "--ro-bind", str(mount.source.resolve()), mount.target)
    ]
    as_nobody = os.getuid() == 0 and _user_namespace_works(bwrap)
    user = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)] if as_nobody else []
    return [
        bwrap,
        "--unshare-all",
        *user,
        "--cap-drop", "ALL",
        "--die-with-parent",
        *system,
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        *runtime,
        *sources,
        *hidden,
        *binds,
        "--chdir", str(cwd.resolve()),
        "--",
        *argv,
    ]  # fmt: skip


@functools.cache
def _runtime_roots() -> tuple[str, ...]:
    """The folders of this interpreter: the venv (its site-packages hold the tools' packages), the base installation
    it points to (the standard library, libpython), and any other site-packages on its path — a venv layered on
    another by a ``.pth`` line (``make install-trl``) imports the tools' packages from there."""
    roots = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent}
    roots |= {Path(entry).resolve() for entry in sys.path if Path(entry).name in ("site-packages", "dist-packages")}
    roots = {root for root in roots if root.is_dir() and root != Path("/")}
    return tuple(
        sorted(str(root) for root in roots if not any(root != other and root.is_relative_to(other) for other in roots))
    )


def _package_root() -> Path:
    """The folder holding the ``envs`` package (the checkout, for an editable install)."""
    return Path(__file__).resolve().parents[2]


@functools.cache
def _app_cli_sources() -> tuple[str, ...]:
    """``APP_CLI_SOURCES`` of this checkout, unless a runtime root already holds them (an installed package)."""
    root = _package_root()
    if any(root.is_relative_to(runtime) for runtime in _runtime_roots()):
        return ()
    return tuple(str(root / rel) for rel in APP_CLI_SOURCES if (root / rel).exists())


@functools.cache
def _hidden_package_dirs() -> tuple[str, ...]:
    """``HIDDEN_PACKAGE_DIRS`` of an ``envs`` package that lies inside a bound runtime root."""
    envs = _package_root() / "envs"
    if not any(envs.is_relative_to(runtime) for runtime in _runtime_roots()):
        return ()
    return tuple(str(envs / name) for name in HIDDEN_PACKAGE_DIRS if (envs / name).is_dir())


@functools.cache
def _user_namespace_works(bwrap: str) -> bool:
    """Whether bwrap can switch to ``nobody`` in a user namespace here (some container runtimes forbid creating one
    even to root; the sandbox then keeps uid 0, without capabilities)."""
    uid = str(SANDBOX_UID)
    probe = [bwrap, "--unshare-user", "--uid", uid, "--gid", uid, "--ro-bind", "/", "/", "--", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False).returncode == 0
    except (subprocess.TimeoutExpired, OSError):
        return False


@functools.cache
def usable_bwrap() -> str | None:
    """The path of a bwrap that can create its namespaces here, or None (with a one-time warning saying why).

    Installed is not enough: containers and some distributions forbid unprivileged user namespaces, so a trivial
    sandbox is started once to find out.
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        log.warning("bubblewrap (bwrap) is not on PATH: code_exec runs with rlimits only (apt-get install bubblewrap)")
        return None
    probe = bwrap_argv(bwrap, ["true"], Path("/"), [Path("/tmp")])
    try:
        result = subprocess.run(probe, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        log.warning("bwrap did not start a sandbox within %.0f s: code_exec runs with rlimits only", PROBE_TIMEOUT_S)
        return None
    if result.returncode != 0:
        reason = result.stderr.decode(errors="replace").strip()
        log.warning("bwrap cannot create a sandbox here (%s): code_exec runs with rlimits only", reason)
        return None
    return bwrap


def isolate(
    argv: Sequence[str], cwd: Path, writable: Sequence[Path], isolation: Isolation, mounts: Sequence[Mount] = ()
) -> list[str]:
    """``argv`` wrapped for ``isolation``; ``bwrap`` raises when bubblewrap cannot run here, ``auto`` falls back.

    ``mounts`` need bubblewrap whatever the isolation: code written against their paths cannot run without them.
    """
    bwrap = usable_bwrap() if isolation is not Isolation.NONE or mounts else None
    if bwrap is None:
        if mounts:
            targets = ", ".join(mount.target for mount in mounts)
            raise RuntimeError(f"binding {targets} needs bubblewrap, which cannot run here (see log)")
        if isolation is Isolation.BWRAP:
            raise RuntimeError(f"{LIMITS_ENV} asks for isolation 'bwrap' but bubblewrap cannot run here (see log)")
        return list(argv)
    return bwrap_argv(bwrap, argv, cwd, writable, mounts)
