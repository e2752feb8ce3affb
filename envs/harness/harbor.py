"""A Harbor task folder run unchanged: its sandbox, what each phase sees at Harbor's paths, its verifier.

Harbor runs a task in a container built from ``environment/Dockerfile`` (or ``[environment].docker_image``): the
agent works in the image's WORKDIR (``/app`` by convention), the oracle agent finds ``solution/`` at ``/solution``,
the verifier ``tests/`` at ``/tests`` once the agent is done, and the verifier writes ``/logs/verifier/reward.txt`` or
``reward.json``. A task's scripts use these absolute paths. Here a sample's sandbox is a host folder::

    sandbox/app/              the working folder, shaped by the Dockerfile's COPY / RUN steps (envs.harness.dockerfile)
    sandbox/tests/            tests/, copied in only for the verifier
    sandbox/solution/         solution/, copied in only for the oracle
    sandbox/logs/verifier/    the verifier's logs (emptied before it runs)

and each phase (``Phase``) sees some of these folders at Harbor's paths (``PHASE_MOUNTS``): under bubblewrap through
bind mounts (``run_in_phase``; the agent never sees ``/tests`` or ``/solution``), in a container through
``docker_plan`` (the image holds the working folder; tests and solution are copied in, the logs bind-mounted),
executed by ``envs.harness.harbor_docker``.

``task.toml`` is honoured: ``[agent]`` / ``[verifier]`` ``timeout_sec``, ``[environment]`` ``build_timeout_sec``,
``memory_mb`` (the per-process address-space cap under bubblewrap, the container's memory in docker; never above the
host's configured cap) and ``cpus`` (docker only: bubblewrap has no CPU quota; the rlimits' CPU seconds still hold).

Nothing of the host comes in through the task folder: every COPY source, every folder copied into the sandbox and
every symlink in them must resolve inside the task folder (``envs.loaders.resolve_task_path``), and links are copied
as links, never followed on the host.
"""

from __future__ import annotations

import functools
import glob
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath

from envs.apps.code_exec import MAX_TIMEOUT_S, ExecResult
from envs.graders import VERIFIER_LOGS, read_verifier_reward
from envs.harness.code_tools import DEFAULT_BASH_TIMEOUT_S, run_bash
from envs.harness.dockerfile import Copy, DockerfileError, DockerfileRecipe, read_dockerfile
from envs.loaders import HARBOR_SOLUTION_SCRIPT, HARBOR_TEST_SCRIPT, resolve_task_path
from envs.oracle import OracleError
from envs.sandbox.limits import Mount, ResourceLimits
from envs.types import TaskSpec

DEFAULT_VERIFIER_TIMEOUT_S = 120.0  # Harbor's own default when task.toml sets no [verifier] timeout_sec
DEFAULT_BUILD_TIMEOUT_S = 600.0
VERIFIER_OUTPUT = "test-stdout.txt"
TESTS_PATH = "/tests"
SOLUTION_PATH = "/solution"
VERIFIER_LOGS_PATH = "/" + VERIFIER_LOGS.as_posix()

log = logging.getLogger(__name__)


class Phase(StrEnum):
    SETUP = "setup"  # the Dockerfile's RUN steps
    AGENT = "agent"
    ORACLE = "oracle"  # Harbor's oracle agent: bash /solution/solve.sh
    VERIFIER = "verifier"


PHASE_MOUNTS: dict[Phase, tuple[tuple[str, str | None], ...]] = {
    Phase.SETUP: (("app", None),),
    Phase.AGENT: (("app", None),),
    Phase.ORACLE: (("app", None), ("solution", SOLUTION_PATH)),
    Phase.VERIFIER: (("app", None), ("tests", TESTS_PATH), ("logs", VERIFIER_LOGS_PATH)),
}
"""Per phase, the sandbox folders it sees and where (None: the working folder, the Dockerfile's WORKDIR)."""
PHASE_UPLOADS: dict[Phase, tuple[tuple[Path, str], ...]] = {
    Phase.ORACLE: ((HARBOR_SOLUTION_SCRIPT.parent, SOLUTION_PATH),),
    Phase.VERIFIER: ((HARBOR_TEST_SCRIPT.parent, TESTS_PATH),),
}
"""Per phase, the task folders copied in before it (relative to the task folder, and their path inside)."""


class HarborEnvironmentError(RuntimeError):
    """The task's environment cannot be set up here (a Dockerfile step failed or cannot be followed locally)."""


def harbor_task_dir(task: TaskSpec) -> Path:
    """The task folder a Harbor ``TaskSpec`` was loaded from (``metadata["task_dir"]``)."""
    folder = task.metadata.get("task_dir")
    if task.metadata.get("source") != "harbor" or not folder:
        raise ValueError(f"task {task.task_id} is not a Harbor task (load it with envs.loaders.load_harbor)")
    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"the folder of Harbor task {task.task_id} is gone: {path}")
    return path


def task_limits(task: TaskSpec, limits: ResourceLimits | None) -> ResourceLimits:
    """``limits`` (the environment's by default: the host's configured cap) with the task's ``[environment].memory_mb``
    when it sets one, never above that cap: a task may lower its memory, not raise it (a warning names the task)."""
    limits = limits or ResourceLimits.from_env()
    memory_mb = (task.metadata.get("environment") or {}).get("memory_mb")
    if not memory_mb:
        return limits
    if memory_mb > limits.memory_mb:
        _warn_memory_capped(task.task_id, memory_mb, limits.memory_mb)
    return limits.model_copy(update={"memory_mb": min(memory_mb, limits.memory_mb)})


@functools.cache
def _warn_memory_capped(task_id: str, asked_mb: int, cap_mb: int) -> None:
    """Once per task and values: ``task_limits`` runs for every sample."""
    log.warning(
        "task %s: task.toml asks memory_mb = %d, over this host's cap: capped at %d MiB", task_id, asked_mb, cap_mb
    )


def _timeout(task: TaskSpec, key: str, default: float) -> float:
    return min(task.metadata.get(key) or default, MAX_TIMEOUT_S)


@dataclass(frozen=True)
class HarborSandbox:
    root: Path
    cwd: str = "/app"  # the Dockerfile's WORKDIR, where the sandbox's app/ is seen

    @property
    def workdir(self) -> Path:
        return self.root / "app"

    @property
    def tests(self) -> Path:
        return self.root / "tests"

    @property
    def solution(self) -> Path:
        return self.root / "solution"

    @property
    def logs(self) -> Path:
        return self.root / VERIFIER_LOGS

    def mounts(self, phase: Phase) -> tuple[Mount, ...]:
        folders = {"app": self.workdir, "tests": self.tests, "solution": self.solution, "logs": self.logs}
        return tuple(Mount(folders[name], target or self.cwd) for name, target in PHASE_MOUNTS[phase])


def run_in_phase(
    sandbox: HarborSandbox, phase: Phase, command: str, timeout_s: float, limits: ResourceLimits | None
) -> ExecResult:
    """``bash -c command`` in the working folder under bubblewrap, seeing what ``phase`` sees at Harbor's paths."""
    return run_bash(
        command, cwd=Path(sandbox.cwd), writable=sandbox.workdir, timeout_s=timeout_s, limits=limits,
        mounts=sandbox.mounts(phase),
    )  # fmt: skip


def upload(task: TaskSpec, sandbox: HarborSandbox, phase: Phase) -> None:
    """Copy the task folders ``phase`` needs into the sandbox afresh (whatever an earlier phase left is replaced);
    each must lie inside the task folder with every link in it, and links stay links (``resolve_task_path``)."""
    folders = {TESTS_PATH: sandbox.tests, SOLUTION_PATH: sandbox.solution}
    for source, target in PHASE_UPLOADS.get(phase, ()):
        folder = resolve_task_path(harbor_task_dir(task), source.as_posix())
        shutil.rmtree(folders[target], ignore_errors=True)
        shutil.copytree(folder, folders[target], symlinks=True)


# --- setup: the Dockerfile's steps, followed in the sandbox ----------------------------------------------------------


def _host_path(sandbox: HarborSandbox, container_path: str) -> Path:
    """Where a path under the working folder lies on the host; any other path cannot exist without a container."""
    path, root = PurePosixPath(container_path), PurePosixPath(sandbox.cwd)
    if not path.is_relative_to(root):
        raise HarborEnvironmentError(f"{container_path} lies outside the working folder {sandbox.cwd}: use docker")
    return sandbox.workdir / path.relative_to(root)


def _copy_sources(step: Copy, context: Path) -> list[Path]:
    """What ``step``'s sources match, each inside the build context (as docker keeps them): an absolute source, a
    ``..`` or a symlink leading out would copy a host file into the sandbox."""
    matches = []
    for source in step.sources:
        resolve_task_path(context, source)  # the source as written, before it is matched
        for match in sorted(glob.glob(source, root_dir=context)):
            resolve_task_path(context, match)
            matches.append(context / match)  # a link keeps its own name, as docker copies it
    return matches


def _copy_step(step: Copy, context: Path, sandbox: HarborSandbox) -> None:
    sources = _copy_sources(step, context)
    if not sources:
        raise HarborEnvironmentError(f"COPY {' '.join(step.sources)}: nothing in the build context matches")
    dest = _host_path(sandbox, step.dest)
    into_folder = step.dest.endswith("/") or len(sources) > 1 or dest.is_dir()
    for source in sources:
        if source.is_dir():
            shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
        else:
            target = dest / source.name if into_folder else dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def build_context(task: TaskSpec) -> Path:
    """The task's ``environment/`` folder (its Dockerfile's build context), checked to hold nothing from outside the
    task folder (``resolve_task_path``: it may itself be a symlink, but only to a folder of the task)."""
    return resolve_task_path(harbor_task_dir(task), "environment")


def build_workdir(task: TaskSpec, sandbox: HarborSandbox, recipe: DockerfileRecipe, limits: ResourceLimits) -> None:
    """Follow the Dockerfile's COPY and RUN steps in the sandbox (RUN under bubblewrap, as in the setup phase)."""
    context = build_context(task)
    timeout_s = min(build_timeout_s(task), MAX_TIMEOUT_S)
    for step in recipe.steps:
        if isinstance(step, Copy):
            _copy_step(step, context, sandbox)
            continue
        _host_path(sandbox, step.workdir).mkdir(parents=True, exist_ok=True)
        command = f"cd {step.workdir} && {step.command}"
        result = run_in_phase(sandbox, Phase.SETUP, command, timeout_s, limits)
        if result.exit_code != 0 or result.timed_out:
            raise HarborEnvironmentError(f"RUN {step.command[:200]} failed: {result.render(timeout_s)[-1500:]}")


def create_sandbox(task: TaskSpec, root: Path, limits: ResourceLimits | None = None) -> HarborSandbox:
    """A fresh sandbox under ``root`` (which must not exist yet), its working folder built as the Dockerfile says.

    A task without ``environment/Dockerfile`` gets its ``environment/`` folder (if any) as the working folder.
    """
    environment = build_context(task)
    try:
        recipe = read_dockerfile(environment / "Dockerfile")
    except DockerfileError as exc:
        raise HarborEnvironmentError(f"task {task.task_id}: {exc}") from None
    sandbox = HarborSandbox(root.resolve(), recipe.workdir)
    root.mkdir(parents=True)
    if environment.is_dir() and not (environment / "Dockerfile").is_file():
        shutil.copytree(environment, sandbox.workdir, symlinks=True)
        return sandbox
    sandbox.workdir.mkdir()
    build_workdir(task, sandbox, recipe, task_limits(task, limits))
    return sandbox


# --- the verifier -----------------------------------------------------------------------------------------------------


def run_verifier(task: TaskSpec, sandbox: HarborSandbox, limits: ResourceLimits | None = None) -> ExecResult:
    """Copy ``tests/`` in, empty the verifier logs (a reward file left by the agent must never count), run
    ``bash /tests/test.sh`` with the verifier timeout; its output is kept in ``logs/verifier/test-stdout.txt``."""
    upload(task, sandbox, Phase.VERIFIER)
    shutil.rmtree(sandbox.logs, ignore_errors=True)
    sandbox.logs.mkdir(parents=True)
    command, timeout_s = phase_command(task, Phase.VERIFIER)
    result = run_in_phase(sandbox, Phase.VERIFIER, command, timeout_s, task_limits(task, limits))
    (sandbox.logs / VERIFIER_OUTPUT).write_text(result.render(timeout_s))
    return result


def verifier_reward(sandbox: HarborSandbox) -> float:
    """The reward the verifier wrote as Harbor reads it (reward.txt, else reward.json's ``reward`` or the mean of its
    keys); 0.0 when it wrote none that can be read."""
    try:
        return read_verifier_reward(sandbox.root)
    except Exception:  # the grader's "unmet" (no or unreadable reward file): Harbor would record no reward
        return 0.0


# --- the docker provider's side ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DockerBuild:
    context: Path
    dockerfile: Path
    tag: str
    timeout_s: float


@dataclass(frozen=True)
class HarborDockerPlan:
    """What a container for one Harbor sample needs: build (or pull) ``image``, start it with ``workdir`` as working
    folder, no network, ``cpus`` / ``memory_mb`` (``task_limits``': task.toml's, never above the host's cap) and
    ``volumes`` bound (the verifier logs, read back on this host); before each phase copy ``uploads[phase]`` in
    (``docker cp``), then ``docker exec`` its command (``phase_command``) in ``workdir``."""

    image: str
    build: DockerBuild | None
    workdir: str
    cpus: float | None
    memory_mb: int
    volumes: tuple[Mount, ...]
    uploads: dict[Phase, tuple[Mount, ...]]


def dockerfile_build(task: TaskSpec, tag: str) -> DockerBuild | None:
    """How to build ``task``'s ``environment/Dockerfile`` as ``tag`` (None: the task has no Dockerfile)."""
    context = build_context(task)
    if not (context / "Dockerfile").is_file():
        return None
    return DockerBuild(context, context / "Dockerfile", tag, build_timeout_s(task))


def build_timeout_s(task: TaskSpec) -> float:
    """``task.toml``'s ``[environment] build_timeout_sec``, else ``DEFAULT_BUILD_TIMEOUT_S``."""
    return (task.metadata.get("environment") or {}).get("build_timeout_sec") or DEFAULT_BUILD_TIMEOUT_S


def docker_plan(task: TaskSpec, sandbox: HarborSandbox, limits: ResourceLimits | None = None) -> HarborDockerPlan:
    """The container plan of ``task`` with ``sandbox`` as its host side (``build`` None: use ``docker_image``), within
    ``limits`` (the environment's by default); ``tests/`` and ``solution/`` checked as ``upload`` checks them."""
    environment = task.metadata.get("environment") or {}
    image = environment.get("docker_image") or f"rl-recipe-harbor-{task.task_id}:latest"
    build = None
    if not environment.get("docker_image"):
        build = dockerfile_build(task, image)
        if build is None:
            raise HarborEnvironmentError(f"task {task.task_id} has neither environment/Dockerfile nor docker_image")
    task_dir = harbor_task_dir(task)
    uploads = {
        phase: tuple(
            Mount(resolve_task_path(task_dir, source.as_posix()), target, writable=False) for source, target in pairs
        )
        for phase, pairs in PHASE_UPLOADS.items()
    }
    return HarborDockerPlan(
        image=image,
        build=build,
        workdir=sandbox.cwd,
        cpus=environment.get("cpus"),
        memory_mb=task_limits(task, limits).memory_mb,
        volumes=(Mount(sandbox.logs, VERIFIER_LOGS_PATH),),
        uploads=uploads,
    )


def phase_command(task: TaskSpec, phase: Phase) -> tuple[str, float]:
    """The command Harbor runs in ``phase`` (oracle, verifier) and its timeout."""
    if phase is Phase.ORACLE:
        return f"bash {SOLUTION_PATH}/{HARBOR_SOLUTION_SCRIPT.name}", _timeout(
            task, "agent_timeout_sec", DEFAULT_BASH_TIMEOUT_S
        )
    if phase is Phase.VERIFIER:
        return f"bash {TESTS_PATH}/{HARBOR_TEST_SCRIPT.name}", _timeout(
            task, "verifier_timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S
        )
    raise ValueError(f"Harbor runs no fixed command in the {phase} phase")


def oracle_phase(task: TaskSpec, run: Callable[[], tuple[ExecResult, float]]) -> None:
    """Harbor's oracle agent: ``solution/solve.sh`` must exist, and ``run`` (which runs it in the task's sandbox or
    container and returns the result with its timeout) must exit 0 in time; else ``OracleError``."""
    if not (harbor_task_dir(task) / HARBOR_SOLUTION_SCRIPT).is_file():
        raise OracleError(f"Harbor task {task.task_id} has no {HARBOR_SOLUTION_SCRIPT}")
    result, timeout_s = run()
    if result.exit_code != 0 or result.timed_out:
        raise OracleError(f"{HARBOR_SOLUTION_SCRIPT} of {task.task_id} failed: {result.render(timeout_s)[-2000:]}")
