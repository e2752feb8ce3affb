"""The docker provider for Harbor tasks: a ``HarborDockerPlan`` executed on a real daemon.

Image: ``[environment].docker_image`` when the daemon has it; else ``environment/Dockerfile`` built with the classic
builder (``DOCKER_BUILDKIT=0``), tagged ``rl-recipe-harbor-<task>:<digest>`` (the environment folder, the resolved
Dockerfile and its base images' ids), so an unchanged task is built once. No registry is reachable here, so a ``FROM``
image the daemon lacks (``python:3.12-slim-bookworm``, ``ubuntu:24.04``) is replaced by ``BASE_IMAGE`` — Debian
bookworm with python3, not the named image — and the build log says so; a ``docker_image`` the daemon lacks is rebuilt
from the Dockerfile it came from (or is ``BASE_IMAGE`` when the task has none). The build has no network unless a RUN
step fetches packages (``apt-get``, ``pip``, ``curl``, ...): then ``--network host`` at build time, never at run time.

Sample: one container (``HarborContainer``) idling on ``sleep infinity`` with no network, ``cpus`` / ``memory_mb`` from
task.toml (memory never above the host's cap: ``task_limits``), the verifier logs bind-mounted from the host sandbox,
and the owner label, so a container whose process died of SIGKILL is swept (``envs.sandbox.docker.sweep_orphans``); it
is removed on exit, timeout or error. ``solution/`` is copied in (``docker cp``) only for the oracle and ``tests/`` only
for the verifier, so the agent never sees them; each phase's command runs through ``docker exec`` under coreutils'
``timeout`` (its whole process group killed). The build context and the copied folders are the ones
``envs.harness.harbor`` checked: inside the task folder, no symlink leading out (docker itself keeps COPY sources inside
the context and copies links as links).

Example::

    run = run_reference_agent_docker(task, ReferenceAgent.ORACLE)   # run.reward == 1.0 for a valid task
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envs.apps.code_exec import ExecResult
from envs.graders import grade
from envs.harness.dockerfile import DEFAULT_WORKDIR, instructions
from envs.harness.harbor import (
    VERIFIER_LOGS_PATH,
    VERIFIER_OUTPUT,
    DockerBuild,
    HarborDockerPlan,
    HarborEnvironmentError,
    HarborSandbox,
    Phase,
    docker_plan,
    dockerfile_build,
    oracle_phase,
    phase_command,
    task_limits,
    verifier_reward,
)
from envs.harness.terminal import ReferenceAgent, ReferenceRun
from envs.sandbox.docker import OWNER_LABEL, connect, sweep_orphans, this_owner
from envs.sandbox.limits import ResourceLimits
from envs.scratch import scratch_dir
from envs.types import TaskSpec

BASE_IMAGE = "rl-recipe-base:bookworm"
"""What stands in for a base image the daemon lacks (``make docker-base`` builds it)."""
HARBOR_LABEL = "rl-recipe.harbor"
"""The Harbor task a container runs; every Harbor container also carries ``OWNER_LABEL``."""
BUILD_LOGS = Path(tempfile.gettempdir()) / "rl-recipe-harbor-builds"
KILL_AFTER_S = 5  # after the phase timeout's SIGTERM, SIGKILL to whatever is left in the process group
CLI_GRACE_S = 30  # the docker CLI's own backstop past that (a stuck daemon): the container is removed then
_FROM = re.compile(r"^(\s*FROM\s+(?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE | re.MULTILINE)
_STAGE = re.compile(r"\bAS\s+(\S+)", re.IGNORECASE)
_FETCHES = re.compile(r"\b(apt-get|apt|apk|pip3?|uv|curl|wget|npm|yarn|git|conda|cargo|go)\b")

log = logging.getLogger(__name__)


# --- the image -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedDockerfile:
    text: str  # the Dockerfile with every FROM the daemon lacks replaced by BASE_IMAGE
    bases: tuple[str, ...]  # the images its FROM lines name after that
    notes: tuple[str, ...]  # one line per substitution, for the build log
    needs_network: bool  # a RUN step fetches packages: build with the host's network


def image_present(client: Any, image: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(image)
    except ImageNotFound:
        return False
    return True


def _image_id(client: Any, image: str) -> str:
    """The daemon's id of ``image``, or its name when the daemon lacks it."""
    from docker.errors import ImageNotFound

    try:
        return client.images.get(image).id
    except ImageNotFound:
        return image


def resolve_dockerfile(text: str, present: Callable[[str], bool]) -> ResolvedDockerfile:
    """``text`` with each ``FROM`` the daemon lacks (``present`` says) replaced by ``BASE_IMAGE``; a FROM naming an
    earlier stage or an ``ARG`` is kept."""
    stages: set[str] = set()
    bases: list[str] = []
    notes: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        prefix, image, rest = match.groups()
        keep = image.lower() in stages or "$" in image or present(image)
        if stage := _STAGE.search(rest):
            stages.add(stage.group(1).lower())
        if keep:
            bases.append(image)
            return match.group(0)
        notes.append(f"FROM {image}: not on this daemon and no registry is reachable; built FROM {BASE_IMAGE} instead")
        bases.append(BASE_IMAGE)
        return f"{prefix}{BASE_IMAGE}{rest}"

    resolved = _FROM.sub(substitute, text)
    runs = " ".join(args for keyword, args in instructions(text) if keyword == "RUN")
    return ResolvedDockerfile(resolved, tuple(bases), tuple(notes), bool(_FETCHES.search(runs)))


def _digest(context: Path, resolved: ResolvedDockerfile, client: Any) -> str:
    """The build's cache key: every file of the context, the resolved Dockerfile and the ids of its base images."""
    digest = hashlib.sha256(resolved.text.encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(path.relative_to(context).as_posix().encode() + b"\0" + path.read_bytes())
    for base in resolved.bases:
        digest.update(_image_id(client, base).encode())
    return digest.hexdigest()[:16]


def _image_tag(task: TaskSpec, digest: str) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", task.task_id.lower()).strip("-._") or "task"
    return f"rl-recipe-harbor-{name}:{digest}"


def build_image(client: Any, build: DockerBuild, resolved: ResolvedDockerfile) -> Path:
    """Build ``resolved`` as ``build.tag`` unless the daemon has it; returns the build log (HarborEnvironmentError
    when the build fails or outlasts ``build.timeout_s``)."""
    BUILD_LOGS.mkdir(parents=True, exist_ok=True)
    stem = BUILD_LOGS / build.tag.replace(":", "-").replace("/", "-")
    log_path = stem.with_suffix(".log")
    if image_present(client, build.tag):
        return log_path
    dockerfile = stem.with_suffix(".Dockerfile")
    dockerfile.write_text(resolved.text, encoding="utf-8")
    network = "host" if resolved.needs_network else "none"
    argv = ["docker", "build", "--network", network, "-t", build.tag, "-f", str(dockerfile), str(build.context)]
    started, environ = time.perf_counter(), {**os.environ, "DOCKER_BUILDKIT": "0"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=build.timeout_s, env=environ)
        output, failed = done.stdout + done.stderr, done.returncode != 0
    except subprocess.TimeoutExpired as expired:
        output = f"{_text(expired.stdout)}{_text(expired.stderr)}\n[timed out after {build.timeout_s:g} s]"
        failed = True
    header = [*resolved.notes, f"docker build --network {network}: {time.perf_counter() - started:.1f} s"]
    log_path.write_text("\n".join([*header, output]), encoding="utf-8")
    for note in resolved.notes:
        log.warning("%s: %s", build.tag, note)
    if failed:
        raise HarborEnvironmentError(f"building {build.tag} failed (log: {log_path}): {output[-1500:]}")
    return log_path


def resolve_image(client: Any, task: TaskSpec, plan: HarborDockerPlan) -> str:
    """The image a sample of ``plan`` runs: its ``docker_image`` if the daemon has it, else built (see module doc)."""
    build = plan.build
    if build is None:
        if image_present(client, plan.image):
            return plan.image
        log.warning("%s: docker_image %s is not on this daemon and no registry is reachable", task.task_id, plan.image)
        build = dockerfile_build(task, plan.image)  # the Dockerfile the image was built from
        if build is None:
            return BASE_IMAGE
    text = build.dockerfile.read_text(encoding="utf-8")
    resolved = resolve_dockerfile(text, functools.partial(image_present, client))
    build = replace(build, tag=_image_tag(task, _digest(build.context, resolved, client)))
    build_image(client, build, resolved)
    return build.tag


@functools.cache
def docker_client() -> Any:
    """This process's daemon connection; the first one also removes the containers dead processes left."""
    client = connect()
    sweep_orphans(client)
    return client


# --- one sample's container ------------------------------------------------------------------------------------------


class HarborContainer:
    """One sample's container: phases run in it through ``docker exec``, each seeing only its uploads."""

    def __init__(self, task: TaskSpec, sandbox: HarborSandbox, plan: HarborDockerPlan, container: Any) -> None:
        self.task, self.sandbox, self.plan, self.container = task, sandbox, plan, container

    def upload(self, phase: Phase) -> None:
        """``docker cp`` the task folders ``phase`` needs into the container (only that phase's)."""
        for mount in self.plan.uploads.get(phase, ()):
            self._docker("cp", f"{mount.source}/.", f"{self.container.id}:{mount.target}", timeout_s=60)

    def exec(self, command: str, timeout_s: float) -> ExecResult:
        """``bash -c command`` in the working folder; past ``timeout_s`` its process group is killed."""
        argv = ["exec", "-w", self.plan.workdir, self.container.id]
        argv += ["timeout", f"--kill-after={KILL_AFTER_S}", f"{timeout_s:g}", "bash", "-c", command]
        started = time.perf_counter()
        try:
            done = self._docker(*argv, timeout_s=timeout_s + KILL_AFTER_S + CLI_GRACE_S, check=False)
        except subprocess.TimeoutExpired as expired:
            out, err = (_text(expired.stdout), _text(expired.stderr))
            return ExecResult(-9, out, err, True, time.perf_counter() - started, timeout_s)
        duration = time.perf_counter() - started
        timed_out = done.returncode in (124, 137) and duration >= timeout_s
        return ExecResult(done.returncode, done.stdout, done.stderr, timed_out, duration, timeout_s)

    def run_phase(self, phase: Phase) -> tuple[ExecResult, float]:
        """Upload what ``phase`` needs, then run Harbor's command for it (``phase_command``)."""
        self.upload(phase)
        command, timeout_s = phase_command(self.task, phase)
        return self.exec(command, timeout_s), timeout_s

    def run_verifier(self) -> ExecResult:
        """Empty the logs (a reward the agent wrote must never count), run the verifier, hand its logs to this host's
        user (the container runs as root) and keep its output in ``test-stdout.txt``."""
        self.exec(f"mkdir -p {VERIFIER_LOGS_PATH} && find {VERIFIER_LOGS_PATH} -mindepth 1 -delete", 30)
        result, timeout_s = self.run_phase(Phase.VERIFIER)
        self.exec(f"chown -R {os.getuid()}:{os.getgid()} {VERIFIER_LOGS_PATH}", 30)
        (self.sandbox.logs / VERIFIER_OUTPUT).write_text(result.render(timeout_s))
        return result

    def _docker(self, *args: str, timeout_s: float, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)
        if check and done.returncode != 0:
            raise HarborEnvironmentError(f"docker {args[0]} failed: {done.stderr.strip()[-500:]}")
        return done


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


@contextmanager
def harbor_container(
    task: TaskSpec, root: Path, limits: ResourceLimits | None = None, client: Any = None
) -> Iterator[HarborContainer]:
    """A started container for one sample of ``task`` (its host side under ``root``), removed on exit."""
    client = client or docker_client()
    plan = docker_plan(task, HarborSandbox(root.resolve()), limits)  # only the logs' folder is known before the image
    image = resolve_image(client, task, plan)
    workdir = client.images.get(image).attrs["Config"].get("WorkingDir") or DEFAULT_WORKDIR  # Harbor's cwd: WORKDIR
    sandbox = HarborSandbox(root.resolve(), workdir)
    plan = replace(plan, image=image, workdir=workdir)
    sandbox.logs.mkdir(parents=True)
    container = client.containers.run(
        image,
        entrypoint=["sleep"],
        command=["infinity"],
        detach=True,
        working_dir=workdir,  # created when the image lacks it
        network_mode="none",
        nano_cpus=int(plan.cpus * 1e9) if plan.cpus else None,
        mem_limit=f"{plan.memory_mb}m",
        memswap_limit=f"{plan.memory_mb}m",
        pids_limit=task_limits(task, limits).max_processes,
        volumes={str(mount.source): {"bind": mount.target, "mode": "rw"} for mount in plan.volumes},
        labels={HARBOR_LABEL: task.task_id, OWNER_LABEL: this_owner()},
    )
    try:
        yield HarborContainer(task, sandbox, plan, container)
    finally:
        container.remove(force=True)


# --- Harbor's reference agents in a container ------------------------------------------------------------------------


def _oracle(box: HarborContainer) -> None:
    oracle_phase(box.task, lambda: box.run_phase(Phase.ORACLE))


DOCKER_REFERENCE_AGENTS: dict[ReferenceAgent, Callable[[HarborContainer], None]] = {
    ReferenceAgent.ORACLE: _oracle,
    ReferenceAgent.NOP: lambda box: None,
}


def run_reference_agent_docker(
    task: TaskSpec, agent: ReferenceAgent, limits: ResourceLimits | None = None
) -> ReferenceRun:
    """``agent`` in a fresh container of ``task``, then the verifier in the same container (as Harbor runs them)."""
    started = time.perf_counter()
    with scratch_dir(f"harbor-docker-{agent}-{task.task_id}-") as scratch:
        with harbor_container(task, Path(scratch) / "sandbox", limits) as box:
            DOCKER_REFERENCE_AGENTS[agent](box)
            box.run_verifier()
        # A Harbor task has no pristine world to diff against: its rubric reads only the verifier logs.
        graded = grade(task, None, box.sandbox.root, box.sandbox.root)
        return ReferenceRun(agent, graded, verifier_reward(box.sandbox), time.perf_counter() - started)
