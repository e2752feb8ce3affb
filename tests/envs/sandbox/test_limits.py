"""code_exec under ResourceLimits: each hostile program is stopped by its limit, well within the wall-clock budget."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import sys
from pathlib import Path

import pytest

from envs.apps import ToolError, World, call_tool
from envs.apps.code_exec import run_limited
from envs.sandbox.limits import LIMITS_ENV, Isolation, ResourceLimits, rlimit_values, usable_bwrap

MIB = 1024 * 1024


def run(code: str, cwd: Path, limits: ResourceLimits, timeout_s: float = 8):
    return run_limited([sys.executable, "-c", code], cwd, timeout_s, {}, limits)


def test_rlimit_values_by_hand() -> None:
    limits = ResourceLimits(cpu_s=3, memory_mb=100, file_size_mb=2, max_processes=10)
    assert rlimit_values(limits, uid=1000, user_processes=7) == [
        (resource.RLIMIT_CPU, 3, 4),
        (resource.RLIMIT_AS, 100 * MIB, 100 * MIB),
        (resource.RLIMIT_FSIZE, 2 * MIB, 2 * MIB),
        (resource.RLIMIT_NPROC, 17, 17),  # the user's 7 processes + 10 more
    ]
    assert rlimit_values(limits, uid=0, user_processes=7)[3] == (resource.RLIMIT_NPROC, 10, 10)


def test_limits_travel_through_the_environment() -> None:
    limits = ResourceLimits(cpu_s=5, wall_s=2.5, isolation=Isolation.NONE)
    assert ResourceLimits.from_env(limits.to_env()) == limits
    assert ResourceLimits.from_env({}) == ResourceLimits()
    with pytest.raises(ValueError, match=rf"bad \${LIMITS_ENV}.*cpu_s"):
        ResourceLimits.from_env({LIMITS_ENV: '{"cpu_s": -1}'})


def test_infinite_loop_is_killed_by_the_cpu_limit(tmp_path: Path) -> None:
    result = run("while True:\n    pass", tmp_path, ResourceLimits(cpu_s=1))
    assert not result.timed_out and result.duration_s < 6
    # killed by SIGXCPU (or SIGKILL at the hard limit); under bwrap its init reports that as 128 + the signal number
    killed = {signal.SIGXCPU, signal.SIGKILL}
    assert result.exit_code in {-sig for sig in killed} | {128 + sig for sig in killed}


def test_wall_limit_caps_the_requested_timeout(tmp_path: Path) -> None:
    result = run("import time; time.sleep(30)", tmp_path, ResourceLimits(wall_s=0.5), timeout_s=30)
    assert result.timed_out and result.duration_s < 5 and result.exit_code == -signal.SIGKILL
    assert "timed out after 0.5 s" in result.render(30)


def test_memory_hog_gets_memory_error(tmp_path: Path) -> None:
    result = run("x = bytearray(1024 * 1024 * 1024)", tmp_path, ResourceLimits(memory_mb=256))
    assert result.exit_code == 1 and "MemoryError" in result.stderr


def test_huge_file_write_stops_at_the_size_limit(tmp_path: Path) -> None:
    code = "open('big.bin', 'wb').write(b'x' * (3 * 1024 * 1024))"
    result = run(code, tmp_path, ResourceLimits(file_size_mb=1))
    assert result.exit_code == 1 and "File too large" in result.stderr
    assert (tmp_path / "big.bin").stat().st_size <= MIB


def test_fork_bomb_is_refused_by_nproc(tmp_path: Path) -> None:
    # The kernel never applies RLIMIT_NPROC to uid 0, so as root the bomb runs as `nobody` (setpriv keeps the rlimits
    # across the uid change); that is also what the limit does for any unprivileged sandbox user. The bomb is bounded
    # (60 sleepers) so that a broken limit fails the test instead of the machine.
    bomb = "for i in $(seq 60); do sleep 5 & done; echo spawned"
    argv = ["bash", "-c", bomb]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: RLIMIT_NPROC cannot be exercised")
        argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    limits = ResourceLimits(max_processes=20, isolation=Isolation.NONE)
    result = run_limited(argv, Path("/"), 3, {"PATH": os.defpath}, limits)
    assert "Resource temporarily unavailable" in result.stderr


needs_bwrap = pytest.mark.skipif(usable_bwrap() is None, reason="bubblewrap cannot create a sandbox here")


@needs_bwrap
def test_writing_outside_the_world_is_refused_under_bwrap(tmp_path: Path) -> None:
    cwd = tmp_path / "world" / "filesystem"
    cwd.mkdir(parents=True)
    host_file = Path(__file__).parent / f"escape-{os.getpid()}.txt"  # the checkout: not even visible inside
    venv_file = Path(sys.prefix) / f"escape-{os.getpid()}.txt"  # the interpreter's folder: visible, read-only
    tmp_file = tmp_path / "outside.txt"  # under /tmp: lands in the sandbox's private tmpfs, never on the host
    code = (
        "import sys\n"
        "open('inside.txt', 'w').write('ok')\n"
        f"open({str(tmp_file)!r}, 'w').write('private')\n"
        f"for target in ({str(host_file)!r}, {str(venv_file)!r}):\n"
        "    try:\n"
        "        open(target, 'w').write('escaped')\n"
        "    except OSError as error:\n"
        "        print(error.strerror)\n"
    )
    try:
        result = run(code, cwd, ResourceLimits(isolation=Isolation.BWRAP))
        assert result.exit_code == 0
        assert result.stdout.splitlines() == ["No such file or directory", "Read-only file system"]
        assert (cwd / "inside.txt").read_text() == "ok"
        assert not host_file.exists() and not venv_file.exists() and not tmp_file.exists()
    finally:
        host_file.unlink(missing_ok=True)
        venv_file.unlink(missing_ok=True)


@needs_bwrap
def test_no_network_under_bwrap(tmp_path: Path) -> None:
    code = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)"
    result = run(code, tmp_path, ResourceLimits(isolation=Isolation.BWRAP))
    assert result.exit_code == 1 and "Network is unreachable" in result.stderr


def test_app_path_checks_refuse_paths_outside_the_world(tmp_path: Path) -> None:
    (tmp_path / "w" / "filesystem").mkdir(parents=True)
    with pytest.raises(ToolError, match="leaves the world root"):
        call_tool(World(tmp_path / "w"), "filesystem.write_file", {"path": "../escape.txt", "content": "x"})
    assert not (tmp_path / "w" / "escape.txt").exists()


def test_bwrap_binds_runtime_roots_back_over_the_private_tmp(monkeypatch, tmp_path):
    """A venv or checkout under /tmp (CI clones) must stay visible under bwrap's tmpfs on /tmp, the world writable."""
    from envs.sandbox import limits

    monkeypatch.setattr(limits, "_runtime_roots", lambda: ("/tmp/clone/.venv",))
    argv = limits.bwrap_argv("bwrap", ["python", "-V"], tmp_path, [tmp_path])
    tmpfs, runtime, world = argv.index("--tmpfs"), argv.index("/tmp/clone/.venv"), argv.index(str(tmp_path.resolve()))
    assert tmpfs < runtime < world
    assert argv[runtime - 1] == "--ro-bind" and argv[world - 1] == "--bind"


def test_a_layered_venvs_other_site_packages_are_runtime_roots(monkeypatch, tmp_path):
    """A venv layered on another by a .pth line (make install-trl) imports the tools' packages from the other's
    site-packages: the sandbox must bind it too (else the app CLI cannot import them and a code-only replay differs)."""
    from envs.sandbox import limits

    other = tmp_path / "main" / "lib" / "python3.11" / "site-packages"
    other.mkdir(parents=True)
    monkeypatch.setattr(limits.sys, "path", [*limits.sys.path, str(other)])
    limits._runtime_roots.cache_clear()
    try:
        assert str(other.resolve()) in limits._runtime_roots()
    finally:
        limits._runtime_roots.cache_clear()
