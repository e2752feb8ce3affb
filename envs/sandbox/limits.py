"""Resource limits and isolation for the code an agent runs (``code_exec``), configured once through the environment.

``ResourceLimits`` travels as JSON in ``RL_RECIPE_SANDBOX_LIMITS``: the sandbox provider sets it on the gateway
subprocess, and ``envs.apps.code_exec.run_limited`` reads it for every launch, so every process the gateway starts
inherits the same limits. Two layers apply them:

- rlimits, set in the child between fork and exec (``preexec``): ``RLIMIT_CPU`` (CPU seconds; SIGXCPU at the soft
  limit, SIGKILL one second later), ``RLIMIT_AS`` (address space: allocations beyond it fail, Python raises
  MemoryError), ``RLIMIT_FSIZE`` (largest file written: EFBIG, or SIGXFSZ for programs that do not ignore it),
  ``RLIMIT_NPROC`` (processes of the user: ``fork`` fails with EAGAIN);
- bubblewrap (``bwrap``), when on PATH and able to create namespaces: no network, a private ``/tmp``, a read-only
  view of the host, and the working folder and the launch's scratch folder (HOME, TMPDIR) as the only writable host
  paths. Without it a one-time warning is logged and only the rlimits and the apps' own path checks hold.

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
            "sandboxed code runs as root: the kernel does not enforce RLIMIT_NPROC for uid 0, so a fork bomb is only "
            "stopped by the wall-clock kill; run the sandbox as an unprivileged user"
        )


# --- bubblewrap -------------------------------------------------------------------------------------------------------


def bwrap_argv(bwrap: str, argv: Sequence[str], cwd: Path, writable: Sequence[Path]) -> list[str]:
    """``argv`` under bubblewrap: every namespace unshared (no network), the host read-only, a private /tmp, and each
    ``writable`` folder bound read-write. The order matters: later mounts cover earlier ones, so the world is bound
    after the tmpfs on /tmp (worlds often live under /tmp)."""
    binds = [arg for path in writable for arg in ("--bind", str(path.resolve()), str(path.resolve()))]
    # The private /tmp would hide an interpreter or a checkout that lives under /tmp (CI clones often do): bind them
    # back read-only before the world.
    runtime = [arg for path in _runtime_roots() for arg in ("--ro-bind", path, path)]
    return [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        *runtime,
        *binds,
        "--chdir", str(cwd.resolve()),
        "--",
        *argv,
    ]  # fmt: skip


@functools.cache
def _runtime_roots() -> tuple[str, ...]:
    """Folders sandboxed code needs to read that a tmpfs on /tmp could cover: the venv, the base interpreter and this
    checkout (an editable install imports ``envs`` from it)."""
    checkout = Path(__file__).resolve().parents[2]
    roots = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), checkout}
    return tuple(sorted(str(root) for root in roots if root.is_relative_to("/tmp")))


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


def isolate(argv: Sequence[str], cwd: Path, writable: Sequence[Path], isolation: Isolation) -> list[str]:
    """``argv`` wrapped for ``isolation``; ``bwrap`` raises when bubblewrap cannot run here, ``auto`` falls back."""
    if isolation is Isolation.NONE:
        return list(argv)
    bwrap = usable_bwrap()
    if bwrap is None:
        if isolation is Isolation.BWRAP:
            raise RuntimeError(f"{LIMITS_ENV} asks for isolation 'bwrap' but bubblewrap cannot run here (see log)")
        return list(argv)
    return bwrap_argv(bwrap, argv, cwd, writable)
