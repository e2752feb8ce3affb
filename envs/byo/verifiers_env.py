"""A ``verifiers`` environment through rl-recipe's harness: its tasks become tasks, its toolsets a world's MCP server,
its rewards a criterion (``VerifiersReward``).

verifiers pins another MCP SDK than ours, so it lives in a venv of its own (``.venv-mcp/verifiers``, ``make
install-mcp-servers``) and runs there through ``verifiers_bridge.py``, which loads the environment with verifiers' own
``load_environment``:

* tasks — ``bridge tasks`` lists them (prompt and system prompt); every ``heldout_every``-th is held out; tasks whose
  toolsets are the same classes and configs, set up for no task in particular, share a world (``tools-<n>``), any
  other task has one of its own (verifiers makes toolsets per task);
* tools — the world's server is ``bridge serve-tools --task n``: the task's toolsets (and the taskset's) as one stdio
  MCP server, started per rollout like any team server (``envs.byo.servers``), offered as ``vf_<toolset>_<tool>``;
* rewards — ``VerifiersReward`` asks a scorer process (``bridge score``, one per environment, kept alive) to run the
  task's ``score`` on the rollout's reply: the reward functions see the prompt and the final reply (``last_reply``),
  not the tool calls between them (rl-recipe's grader is handed the answer only).

    content = verifiers_content(VerifiersSpec(id="ledger-tasks", path="."), env_dir)
"""

from __future__ import annotations

import atexit
import json
import os
import re
import selectors
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from envs.byo.spec import OWN_ENVIRONMENT, VERIFIERS_SERVER, EnvironmentFileError, ServerSpec, VerifiersSpec
from envs.errors import RecipeError
from envs.files import atomic_write_text
from envs.types import Domain, Split, TaskSpec, Tier, VerifiersReward

BRIDGE = Path(__file__).with_name("verifiers_bridge.py")
DEFAULT_PYTHON = Path(__file__).resolve().parents[2] / ".venv-mcp" / "verifiers" / "bin" / "python"


class VerifiersError(RecipeError, RuntimeError):
    """The verifiers side failed: it could not load the environment, or a scorer did not answer."""


@dataclass(frozen=True)
class VerifiersContent:
    tasks: list[TaskSpec]
    servers: dict[str, ServerSpec]
    """Each world's one server (world id -> its ``vf`` server: the toolsets of the world's first task)."""


def _python(spec: VerifiersSpec, env_dir: Path) -> str:
    python = Path(spec.python) if spec.python else DEFAULT_PYTHON
    python = python if python.is_absolute() or spec.python is None else env_dir / python
    if not python.exists():
        raise EnvironmentFileError(f"verifiers: no Python at {python} (make install-mcp-servers makes the venv)")
    return str(python)


def bridge_command(python: str, env_id: str, path: str | None, command: str, *extra: str) -> list[str]:
    """``verifiers_bridge.py command`` for the environment ``env_id`` (its module in ``path``, when given)."""
    return [python, str(BRIDGE), command, "--env", env_id, *(["--path", path] if path else []), *extra]


def verifiers_content(name: str, spec: VerifiersSpec, env_dir: Path) -> VerifiersContent:
    """The environment's tasks (as ``TaskSpec``) and each task's world server, from the verifiers side."""
    python = _python(spec, env_dir)
    path = str((env_dir / spec.path).resolve()) if spec.path else None
    command = bridge_command(python, spec.id, path, "tasks")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=spec.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise VerifiersError(f"verifiers {spec.id}: no task list within {spec.timeout_s:g} s") from None
    if done.returncode != 0:
        raise VerifiersError(f"verifiers {spec.id} does not load: {done.stderr.strip()[-2000:]}")
    rows = json.loads(done.stdout)["tasks"]
    if len(rows) < 2:
        raise VerifiersError(f"verifiers {spec.id}: {len(rows)} task(s); the chain needs a train and a held-out one")
    tasks, servers = [], {}
    worlds: dict[str, str] = {}  # tools key -> world
    for row in rows:
        index = row["index"]
        world = worlds.setdefault(row["tools"], f"tools-{len(worlds) + 1}")
        reward = VerifiersReward(environment=spec.id, task=index, python=python, path=path, timeout_s=spec.timeout_s)
        prompt = f"{row['system_prompt']}\n\n{row['prompt']}" if row["system_prompt"] else row["prompt"]
        split = Split.HELDOUT if index % spec.heldout_every == spec.heldout_every - 1 else Split.TRAIN
        tasks.append(
            TaskSpec(
                task_id=f"{name}-{index}",
                world_id=world,
                domain=Domain.GENERAL,
                tier=Tier.TOY,
                split=split,
                prompt=prompt,
                rubric=[reward],
                metadata={OWN_ENVIRONMENT: name, "verifiers_id": row["id"]},
            )
        )
        if world in servers:  # the same tools as an earlier task's: its world
            continue
        serve = bridge_command(python, spec.id, path, "serve-tools", "--task", str(index))
        servers[world] = VERIFIERS_SERVER.model_copy(
            update={"command": tuple(serve), "timeout_s": spec.timeout_s, "start_timeout_s": spec.timeout_s}
        )
    return VerifiersContent(tasks, servers)


class _Scorer:
    """One ``bridge score`` process, fed one JSON line per reward; restarted when it died or stalled."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def score(self, task: int, messages: list[dict[str, str]], timeout_s: float) -> dict:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = subprocess.Popen(
                    self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    text=True, bufsize=1, env=os.environ | {"PYTHONUNBUFFERED": "1"},
                )  # fmt: skip
            process = self._process
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps({"task": task, "messages": messages}) + "\n")
            process.stdin.flush()
            line = _read_line(process, timeout_s)
            if line is None:
                self.close()
                raise VerifiersError(f"verifiers scorer: no answer within {timeout_s:g} s")
        answer = json.loads(line)
        if "error" in answer:
            raise VerifiersError(f"verifiers scorer: {answer['error']}")
        return answer

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)
        self._process = None


def _read_line(process: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The scorer's next line, or None when it sent none in time (or exited)."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if selector.select(left):
                line = process.stdout.readline()
                return line or None
    return None


_SCORERS: dict[tuple[str, ...], _Scorer] = {}
_SCORERS_LOCK = threading.Lock()


@atexit.register
def _close_scorers() -> None:
    for scorer in _SCORERS.values():
        scorer.close()


def verifiers_reward(criterion: VerifiersReward, prompt: str, answer: str | None) -> float:
    """The task's verifiers reward for a rollout that asked ``prompt`` and replied ``answer``."""
    command = bridge_command(criterion.python, criterion.environment, criterion.path, "score")
    with _SCORERS_LOCK:
        scorer = _SCORERS.setdefault(tuple(command), _Scorer(command))
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer or ""}]
    return float(scorer.score(criterion.task, messages, criterion.timeout_s)["reward"])


def verifiers_environment_file(env_id: str, root: Path) -> Path:
    """An environment file for the verifiers environment ``env_id`` installed in the verifiers venv (``--set
    environment.verifiers=ID``), written under the data root: the build then goes the way of any environment file."""
    name = re.sub(r"[^a-z0-9]+", "-", env_id.rsplit("/", 1)[-1].split("@", 1)[0].lower()).strip("-") or "verifiers"
    folder = root / f"verifiers-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    text = (
        f"# written by rl-recipe for --set environment.verifiers={env_id}\n"
        f"name: {name}\nverifiers: {{id: {json.dumps(env_id)}}}\n"
    )
    atomic_write_text(folder / "environment.yaml", text)
    return folder / "environment.yaml"
