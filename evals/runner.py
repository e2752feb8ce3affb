"""The eval runner: every (task, pass) trial of a task set, one rollout each, through one agent harness.

``run_eval(spec)`` loads the tasks (``TaskSource``), opens the harness's environments (``HARNESSES``: MCP tools,
code-only tools or a terminal), and runs ``spec.passes`` rollouts of every task against an OpenAI-compatible engine
(``CompletionsClient``), at most ``spec.concurrency`` at a time. It writes, under ``spec.out_dir``:

* ``spec.json`` — the spec and the resolved harness settings (``resolved_harness``); a rerun into the same folder
  must carry the same ones (the output folder aside);
* ``trials.jsonl`` — one ``TrialRecord`` per finished trial (reward, passed, stop reason, error class, turns, tokens,
  tool calls, timings), appended, flushed and fsynced as each trial ends: the resume log;
* ``trajectories.jsonl`` — the full trajectory of each finished trial (``{"pass_index", "attempts", "trajectory"}``);
* ``eval.json`` — ``EvalResult`` less its trials: the spec, ``evals.stats.summarize`` over the trials, counts and
  timings; written atomically when every trial is done.

Harness settings: the policy's ``harness.json`` (``envs.harness.policy``: tool listing, system prompt, apps, context
budget, max tokens per turn — what it was trained with), found in ``spec.policy``, else in the tokenizer folder, else
in the model when that is a local folder; ``spec.harness_config``'s set fields go on top. Without a ``harness.json``
the ``HarnessConfig`` defaults apply. The MCP harness serves only the policy's apps.

Checked before any trial, each failure an ``EvalConfigError`` (a ``RecipeError``: the CLI prints it as one line):
the engine serves ``spec.engine.model`` (``GET /v1/models``), the context budget fits the model card's
``max_model_len``, and the first task's first prompt fits the context budget. An engine that refuses a request during
the run (HTTP 4xx, a reply off the wire format: ``EngineRejected``) stops the eval at once with its reply, also as an
``EvalConfigError``; the finished trials stay for a resume.

Resume: a rerun skips the trials already in ``trials.jsonl`` (a line cut short by a kill is dropped), so a killed run
completes only the rest. Infra failures (``ErrorClass.RETRYABLE_INFRA``: engine down, sandbox setup) are re-run up to
``spec.infra_retries`` times, then recorded as failed (reward 0) with their class, so the summary still covers every
(task, pass) and ``EvalResult.counts`` says how many failed for infra.

Each trial is a ``run_group(..., n=1)`` with group id ``<task_id>/pass<p>``; with a sampling seed set, pass ``p``
samples with seed ``seed + p`` so passes differ but reruns repeat.

Example::

    spec = EvalSpec(tasks=TaskSource(kind="data", path=Path("data"), split="heldout"), harness="mcp",
                    engine=EngineSpec(base_url="http://127.0.0.1:8000", model="policy", tokenizer="runs/x/policy"),
                    passes=3, out_dir=Path("runs/evals/heldout"))
    result = run_eval(spec)      # result.summary.pass_at_1.mean ± result.summary.pass_at_1.se
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from envs.errors import RecipeError
from envs.files import atomic_write_text
from envs.harness.agent import EnvFactory, HarnessConfig, run_group
from envs.harness.chat import initial_messages, prompt_ids
from envs.harness.engine_client import EngineRejected
from envs.harness.policy import HARNESS_FILE, PolicyHarness, read_policy_harness
from envs.jsonio import json_line
from envs.types import ErrorClass, Split, StopReason, TaskSpec, Trajectory
from evals.stats import summarize
from evals.types import Summary, TrialResult

TRIALS_FILE = "trials.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
SPEC_FILE = "spec.json"
RESULT_FILE = "eval.json"
MODELS_TIMEOUT_S = 30.0


class EvalConfigError(RecipeError, ValueError):
    """An eval that cannot run as configured (engine, model name, harness settings, task source, output folder)."""


class HarnessKind(StrEnum):
    """Which tools the agent gets: the MCP apps, code-only tools (bash, read, write, …), or a terminal."""

    MCP = "mcp"
    CODE_ONLY = "code_only"
    TERMINAL = "terminal"


class SourceKind(StrEnum):
    DATA = "data"  # our data folder: <path>/tasks/<split>.jsonl, worlds under <path>/worlds
    JSONL = "jsonl"  # a TaskSpec JSONL file; worlds under ``worlds``
    APEX = "apex"  # an APEX-Agents file; worlds under ``worlds``
    HARBOR = "harbor"  # a folder of Harbor task folders; each task folder is its own world
    BUNDLED_TERMINAL = "bundled-terminal"  # the terminal tasks shipped with envs


class McpBackend(StrEnum):
    """How the MCP harness reaches its tools: the stdio gateway in pooled sandboxes, or the apps in-process."""

    GATEWAY = "gateway"
    IN_PROCESS = "in_process"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskSource(_Spec):
    """Where the tasks come from; ``path`` is required for every kind except ``bundled-terminal``."""

    kind: SourceKind
    path: Path | None = None
    split: Split = Split.HELDOUT
    worlds: Path | None = Field(None, description="worlds folder for jsonl / apex sources")
    limit: int | None = Field(None, ge=1, description="only the first N tasks (in source order)")

    @model_validator(mode="after")
    def _path_given(self) -> TaskSource:
        if self.path is None and self.kind is not SourceKind.BUNDLED_TERMINAL:
            raise ValueError(f"task source {self.kind.value!r} needs a path")
        return self

    def load(self) -> list[TaskSpec]:
        tasks = _LOADERS[self.kind](self)
        if not tasks:
            raise EvalConfigError(f"task source {self.kind.value} {self.path} holds no tasks")
        return tasks[: self.limit]

    def worlds_root(self) -> Path | None:
        """The folder holding ``<world_id>/`` for each task, or None when the source has none."""
        return _WORLDS[self.kind](self)


def _bundled_terminal(_: TaskSource) -> list[TaskSpec]:
    from envs.harness.terminal import bundled_terminal_tasks

    return list(bundled_terminal_tasks())


def _load_data(source: TaskSource) -> list[TaskSpec]:
    from envs.build import load_tasks

    return load_tasks(_path(source), (source.split,))


def _path(source: TaskSource) -> Path:
    assert source.path is not None  # guaranteed by TaskSource's validator
    return source.path


def _lazy(module: str, name: str) -> Callable[[TaskSource], list[TaskSpec]]:
    def load(source: TaskSource) -> list[TaskSpec]:
        return getattr(importlib.import_module(module), name)(_path(source))

    return load


_LOADERS: dict[SourceKind, Callable[[TaskSource], list[TaskSpec]]] = {
    SourceKind.DATA: _load_data,
    SourceKind.JSONL: _lazy("envs.loaders", "load_jsonl"),
    SourceKind.APEX: _lazy("envs.loaders", "load_apex"),
    SourceKind.HARBOR: _lazy("envs.loaders", "load_harbor_dir"),
    SourceKind.BUNDLED_TERMINAL: _bundled_terminal,
}
_WORLDS: dict[SourceKind, Callable[[TaskSource], Path | None]] = {
    SourceKind.DATA: lambda s: _path(s) / "worlds",
    SourceKind.JSONL: lambda s: s.worlds,
    SourceKind.APEX: lambda s: s.worlds,
    SourceKind.HARBOR: _path,  # load_harbor names each task's world after its folder
    SourceKind.BUNDLED_TERMINAL: lambda s: None,
}


class EngineSpec(_Spec):
    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    tokenizer: str | None = Field(None, description="tokenizer folder or hub id; default: the model name")
    timeout_s: float = Field(600.0, gt=0.0)


class HarnessOverrides(_Spec):
    """Changes to the policy's harness settings for this eval (unset fields keep the policy's, else the default)."""

    temperature: float | None = Field(None, ge=0.0)
    max_turns: int | None = Field(None, ge=1)
    max_tokens_per_turn: int | None = Field(None, ge=1)
    context_budget_tokens: int | None = Field(None, ge=2)
    agent_timeout_s: float | None = Field(None, gt=0.0)
    seed: int | None = None

    def apply(self, base: HarnessConfig) -> HarnessConfig:
        """``base`` with the set fields replaced (validated again)."""
        return HarnessConfig.model_validate(base.model_dump() | self.model_dump(exclude_none=True))


class EvalSpec(_Spec):
    """One eval: which tasks, through which harness, against which engine, how many passes, where to write."""

    # core
    tasks: TaskSource
    harness: HarnessKind = HarnessKind.MCP
    engine: EngineSpec
    passes: int = Field(3, ge=1)
    out_dir: Path
    # advanced
    concurrency: int = Field(8, ge=1, description="rollouts in flight at once")
    harness_config: HarnessOverrides = HarnessOverrides()
    policy: Path | None = Field(
        None, description="policy folder whose harness.json sets the harness (default: the tokenizer or model folder)"
    )
    infra_retries: int = Field(2, ge=0, description="re-runs of a trial that failed for infra reasons")
    mcp_backend: McpBackend = McpBackend.GATEWAY

    def identity(self) -> dict[str, Any]:
        """What must match for a rerun to resume this run: what is evaluated and how, not where the results are
        written, where the engine listens (a model served again on another port is the same model) or how many
        trials run at once."""
        return self.model_dump(
            mode="json", exclude={"out_dir": True, "concurrency": True, "engine": {"base_url", "timeout_s"}}
        )

    def policy_candidates(self) -> list[Path]:
        """Where the policy's ``harness.json`` is looked for: ``policy``, else the tokenizer and model folders."""
        if self.policy is not None:
            return [self.policy]
        names = [self.engine.tokenizer, self.engine.model]
        return [Path(name) for name in dict.fromkeys(n for n in names if n) if Path(name).is_dir()]


@dataclass(frozen=True)
class ResolvedHarness:
    """The harness an eval runs with and where its settings came from (for the run's files and error hints)."""

    settings: PolicyHarness
    source: Path | None  # the harness.json read; None: HarnessConfig defaults
    looked_in: list[Path]
    overridden: list[str]  # HarnessConfig fields the spec sets on top

    def origin(self, field: str | None = None) -> str:
        """Where the settings (or one ``HarnessConfig`` field of them) came from, for a reader or an error message."""
        if field is not None and field in self.overridden:
            return "the command line"
        on_top = (
            f", with {', '.join(self.overridden)} from the command line" if field is None and self.overridden else ""
        )
        if self.source is not None:
            return f"the policy's {self.source}{on_top}"
        where = ", ".join(str(p) for p in self.looked_in) or "no local tokenizer or model folder"
        return (
            f"the harness defaults{on_top}, as no {HARNESS_FILE} is in {where} (pass --policy DIR, the served "
            f"policy's folder; `recipe model bootstrap` adds {HARNESS_FILE} to an older cached base)"
        )


def resolve_harness(spec: EvalSpec) -> ResolvedHarness:
    """The policy's ``harness.json`` (``EvalSpec.policy_candidates``, first found) with the spec's overrides on top."""
    looked_in = spec.policy_candidates()
    if spec.policy is not None and not (spec.policy / HARNESS_FILE).is_file():
        raise EvalConfigError(
            f"--policy {spec.policy} holds no {HARNESS_FILE}; policy folders written by recipe carry one "
            "(`recipe model bootstrap` adds it to an older cached base)"
        )
    source, stored = None, None
    for folder in looked_in:
        stored = read_policy_harness(folder)
        if stored is not None:
            source = folder / HARNESS_FILE
            break
    base = stored or PolicyHarness(harness=HarnessConfig())
    settings = base.model_copy(update={"harness": spec.harness_config.apply(base.harness)})
    overridden = sorted(spec.harness_config.model_dump(exclude_none=True))
    return ResolvedHarness(settings, source, looked_in, overridden)


class TrialRecord(BaseModel):
    """One finished trial as written to ``trials.jsonl``: a trajectory's summary, not its tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    pass_index: int = Field(ge=0)
    domain: str | None = None
    tier: str | None = None
    harness: str
    reward: float
    passed: bool
    stop_reason: StopReason
    error_class: ErrorClass | None = None
    error: str | None = None
    attempts: int = Field(ge=1)
    turns: int
    prompt_tokens: int
    completion_tokens: int = Field(description="tokens the model sampled (loss mask 1)")
    total_tokens: int
    tool_calls: int
    tool_errors: int
    tool_calls_by_tool: dict[str, int] = Field(default_factory=dict)
    llm_s: float
    env_s: float
    wall_s: float
    finished_at: str

    @classmethod
    def from_trajectory(
        cls, task: TaskSpec, pass_index: int, trajectory: Trajectory, attempts: int, wall_s: float
    ) -> TrialRecord:
        return cls(
            task_id=task.task_id,
            pass_index=pass_index,
            domain=task.domain.value,
            tier=task.tier.value,
            harness=trajectory.harness,
            reward=trajectory.reward,  # 0 for a trial that was not graded (infra or task failure)
            passed=trajectory.passed,
            stop_reason=trajectory.stop_reason,
            error_class=trajectory.error_class,
            error=None if trajectory.error is None else trajectory.error[:500],
            attempts=attempts,
            turns=len(trajectory.turns),
            prompt_tokens=trajectory.prompt_len,
            completion_tokens=sum(trajectory.loss_mask),
            total_tokens=len(trajectory.tokens),
            tool_calls=len(trajectory.tool_calls),
            tool_errors=sum(not call.ok for call in trajectory.tool_calls),
            tool_calls_by_tool=dict(Counter(call.tool for call in trajectory.tool_calls)),
            llm_s=trajectory.llm_s,
            env_s=trajectory.env_s,
            wall_s=wall_s,
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )

    @property
    def key(self) -> tuple[str, int]:
        return self.task_id, self.pass_index

    def trial_result(self) -> TrialResult:
        return TrialResult(
            task_id=self.task_id,
            pass_index=self.pass_index,
            passed=self.passed,
            reward=self.reward,
            domain=self.domain,
            tier=self.tier,
        )


class EvalTimings(BaseModel):
    started_at: str
    finished_at: str
    wall_s: float = Field(description="this invocation's wall-clock time (a resumed run counts only its own part)")
    trials_run: int = Field(description="trials run by this invocation")
    trials_resumed: int = Field(description="trials found finished in trials.jsonl")
    mean_trial_wall_s: float


class EvalResult(BaseModel):
    """A finished eval: ``eval.json`` holds all of it but ``trials`` (those live in ``trials.jsonl``)."""

    spec: EvalSpec
    summary: Summary
    counts: dict[str, dict[str, int]] = Field(description="trials per stop_reason and per error_class")
    timings: EvalTimings
    harness: PolicyHarness | None = Field(
        None, description="the harness that ran: the policy's harness.json + overrides (None in older eval.json files)"
    )
    harness_source: Path | None = Field(None, description="the harness.json read; None: the HarnessConfig defaults")
    trials: list[TrialRecord] = Field(default_factory=list, exclude=True)

    def trial_results(self) -> list[TrialResult]:
        return [trial.trial_result() for trial in self.trials]

    def unscored(self) -> list[TrialRecord]:
        """Trials that are no outcome of the policy: infra failures (after retries) and broken tasks."""
        return [t for t in self.trials if t.error_class in (ErrorClass.RETRYABLE_INFRA, ErrorClass.TASK)]


@dataclass(frozen=True)
class Progress:
    """Passed to the progress callback after each finished trial (``done`` counts resumed trials too)."""

    done: int
    total: int
    resumed: int
    record: TrialRecord | None  # None for the first call, made before any trial runs


ProgressFn = Callable[[Progress], None]


# --- files -----------------------------------------------------------------------------------------------------------


def _append_line(handle: IO[str], obj: dict[str, Any]) -> None:
    handle.write(json_line(obj))
    handle.flush()
    os.fsync(handle.fileno())


def _complete_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of each newline-terminated line; a last line without newline was cut by a kill."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.endswith("\n") and line.strip():
                yield number, line


def read_trials(path: Path) -> list[TrialRecord]:
    """The finished trials in a ``trials.jsonl``; a bad complete line raises ``ValueError`` naming file and line."""
    records = []
    for number, line in _complete_lines(path):
        try:
            records.append(TrialRecord.model_validate_json(line))
        except ValidationError as error:
            raise ValueError(f"{path}, line {number}: not a trial record: {error}") from None
    return records


def _keep_finished(path: Path, keys: set[tuple[str, int]]) -> None:
    """Rewrite ``path`` (JSONL) keeping one line per finished trial: drops trajectories whose record never landed."""
    if not path.exists():
        return
    kept, seen = [], set()
    for _, line in _complete_lines(path):
        entry = json.loads(line)
        key = (entry["trajectory"]["task_id"], entry["pass_index"])
        if key in keys and key not in seen:
            seen.add(key)
            kept.append(line)
    atomic_write_text(path, "".join(kept))


def _truncate_to_complete(path: Path) -> None:
    """Cut a line left half-written by a kill, so the next append starts on a fresh line."""
    if path.exists():
        atomic_write_text(path, "".join(line for _, line in _complete_lines(path)))


def _prepare_out_dir(spec: EvalSpec, harness: ResolvedHarness) -> list[TrialRecord]:
    """Check the folder holds this spec's run (or none) and return the trials it already finished."""
    out = spec.out_dir
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / SPEC_FILE
    # The resolved settings belong to the identity: a policy folder whose harness.json changed is another eval.
    identity = spec.identity() | {"resolved_harness": harness.settings.model_dump(mode="json")}
    if spec_path.exists():
        previous = json.loads(spec_path.read_text())
        if previous != identity:
            raise EvalConfigError(
                f"{out} holds an eval of a different spec or harness ({spec_path}); use another --out folder or "
                "delete it"
            )
    else:
        atomic_write_text(spec_path, json.dumps(identity, indent=2))
    trials_path = out / TRIALS_FILE
    _truncate_to_complete(trials_path)
    finished = read_trials(trials_path)
    _keep_finished(out / TRAJECTORIES_FILE, {record.key for record in finished})
    return finished


# --- harnesses -------------------------------------------------------------------------------------------------------

EnvsForTask = Callable[[TaskSpec], EnvFactory]
Apps = Sequence[str] | None
HarnessBuilder = Callable[[EvalSpec, Apps, Sequence[TaskSpec], contextlib.AsyncExitStack], Awaitable[EnvsForTask]]
"""(spec, the policy's apps, tasks, exit stack) → task → env factory; shared resources (a sandbox pool) go on the
exit stack. Only the MCP harness serves apps; the code-only and terminal harnesses have tools of their own."""


def _worlds_root(spec: EvalSpec) -> Path:
    root = spec.tasks.worlds_root()
    if root is None:
        raise EvalConfigError(
            f"the {spec.harness.value} harness needs the tasks' worlds; "
            f"give a worlds folder for the {spec.tasks.kind.value} source"
        )
    if not root.is_dir():
        raise EvalConfigError(f"worlds folder {root} does not exist")
    return root


async def _mcp_gateway(
    spec: EvalSpec, apps: Apps, tasks: Sequence[TaskSpec], stack: contextlib.AsyncExitStack
) -> EnvsForTask:
    from envs.rollout import pooled_envs
    from envs.sandbox.local import LocalProvider
    from envs.sandbox.pool import SandboxPool

    root = _worlds_root(spec)
    world_ids = sorted({task.world_id for task in tasks})
    per_world = Counter(task.world_id for task in tasks)
    size = min(spec.concurrency, spec.passes * max(per_world.values()))
    pool = await stack.enter_async_context(
        SandboxPool(LocalProvider({w: root / w for w in world_ids}, apps=apps), size_per_world=size)
    )
    return lambda task: pooled_envs(pool, task, root)


async def _mcp_in_process(
    spec: EvalSpec, apps: Apps, tasks: Sequence[TaskSpec], stack: contextlib.AsyncExitStack
) -> EnvsForTask:
    from envs.rollout import local_envs

    root = _worlds_root(spec)
    return lambda task: local_envs(task, root, apps)


_MCP_BACKENDS: dict[McpBackend, HarnessBuilder] = {
    McpBackend.GATEWAY: _mcp_gateway,
    McpBackend.IN_PROCESS: _mcp_in_process,
}


async def _mcp(spec: EvalSpec, apps: Apps, tasks: Sequence[TaskSpec], stack: contextlib.AsyncExitStack) -> EnvsForTask:
    return await _MCP_BACKENDS[spec.mcp_backend](spec, apps, tasks, stack)


async def _code_only(
    spec: EvalSpec, apps: Apps, tasks: Sequence[TaskSpec], stack: contextlib.AsyncExitStack
) -> EnvsForTask:
    from envs.harness.code_tools import code_only_envs

    root = _worlds_root(spec)
    return lambda task: code_only_envs(task, root)


async def _terminal(
    spec: EvalSpec, apps: Apps, tasks: Sequence[TaskSpec], stack: contextlib.AsyncExitStack
) -> EnvsForTask:
    from envs.harness.terminal import terminal_envs

    return terminal_envs


HARNESSES: dict[HarnessKind, HarnessBuilder] = {
    HarnessKind.MCP: _mcp,
    HarnessKind.CODE_ONLY: _code_only,
    HarnessKind.TERMINAL: _terminal,
}


# --- preflight: configuration errors surface before any trial -------------------------------------------------------


def served_models(base_url: str, timeout_s: float = MODELS_TIMEOUT_S) -> dict[str, dict[str, Any]]:
    """The engine's model cards by id (``GET /v1/models``); an unreachable engine or a bad reply is an
    ``EvalConfigError``."""
    url = f"{base_url.rstrip('/')}/v1/models"
    try:
        response = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as error:
        raise EvalConfigError(
            f"cannot reach the engine at {base_url} ({type(error).__name__}: {error}); start one "
            "(`recipe engine serve --model DIR`) or fix --engine-url"
        ) from None
    if response.status_code != 200:
        raise EvalConfigError(f"GET {url} answered HTTP {response.status_code}: {response.text[:300]}")
    try:
        cards = response.json()["data"]
        return {str(card["id"]): card for card in cards}
    except (ValueError, KeyError, TypeError):
        raise EvalConfigError(f"GET {url} did not list models as OpenAI's API does: {response.text[:300]}") from None


def check_engine(spec: EvalSpec, harness: ResolvedHarness) -> None:
    """The engine serves ``spec.engine.model``, and the context budget fits its card's ``max_model_len``."""
    cards = served_models(spec.engine.base_url, min(spec.engine.timeout_s, MODELS_TIMEOUT_S))
    model = spec.engine.model
    if model not in cards:
        served = sorted(cards)
        fix = f"pass --model {served[0]}" if len(served) == 1 else "pass --model with one of them"
        raise EvalConfigError(f"the engine at {spec.engine.base_url} serves {served}, not {model!r}; {fix}")
    limit = cards[model].get("max_model_len")
    budget = harness.settings.harness.context_budget_tokens
    if isinstance(limit, int) and budget > limit:
        raise EvalConfigError(
            f"the context budget of {budget} tokens exceeds the max_model_len of {limit} with which "
            f"{spec.engine.base_url} serves {model!r}; pass --context-budget {limit} or serve a longer context. "
            f"The budget comes from {harness.origin('context_budget_tokens')}"
        )


async def _check_first_prompt(task: TaskSpec, envs_for: EnvsForTask, tokenizer: Any, harness: ResolvedHarness) -> None:
    """The first task's first prompt, rendered as its rollouts will render it, fits the context budget."""
    config = harness.settings.harness
    try:
        async with envs_for(task)(0) as env:
            tools = await env.tools.list_tools()
    except Exception:  # a task whose environment fails is recorded by its trials (task or infra), not a config error
        return
    size = len(prompt_ids(tokenizer, initial_messages(config.system_prompt, task.prompt), tools, config.tool_listing))
    if size >= config.context_budget_tokens:
        raise EvalConfigError(
            f"the first prompt of task {task.task_id} is {size} tokens ({config.tool_listing.value} tool listing, "
            f"{len(tools)} tools): it does not fit the context budget of {config.context_budget_tokens} tokens, so "
            f"every trial would fail before its first turn. The harness settings come from {harness.origin()}"
        )


# --- the run ---------------------------------------------------------------------------------------------------------


def load_tokenizer(engine: EngineSpec) -> Any:
    from transformers import AutoTokenizer

    name = engine.tokenizer or engine.model
    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise EvalConfigError(
            f"cannot load the tokenizer {name!r} ({type(error).__name__}); pass --tokenizer DIR, the policy folder "
            "the engine serves"
        ) from None


def _pass_config(config: HarnessConfig, pass_index: int) -> HarnessConfig:
    return config if config.seed is None else config.model_copy(update={"seed": config.seed + pass_index})


async def _run_trials(
    spec: EvalSpec,
    harness: ResolvedHarness,
    tasks: Sequence[TaskSpec],
    todo: Sequence[tuple[TaskSpec, int]],
    tokenizer: Any,
    on_record: Callable[[TrialRecord, Trajectory], None],
) -> None:
    from envs.harness.engine_client import CompletionsClient

    config = harness.settings.harness
    gate = asyncio.Semaphore(spec.concurrency)
    async with contextlib.AsyncExitStack() as stack:
        envs_for = await HARNESSES[spec.harness](spec, harness.settings.apps, tasks, stack)
        await _check_first_prompt(todo[0][0], envs_for, tokenizer, harness)
        engine = await stack.enter_async_context(
            CompletionsClient(spec.engine.base_url, spec.engine.model, timeout_s=spec.engine.timeout_s)
        )

        async def trial(task: TaskSpec, pass_index: int) -> None:
            async with gate:
                started = time.perf_counter()
                attempts = 0
                while True:  # re-run infra failures, at most infra_retries times
                    attempts += 1
                    (trajectory,) = await run_group(
                        task,
                        envs_for(task),
                        engine,
                        tokenizer,
                        _pass_config(config, pass_index),
                        group_id=f"{task.task_id}/pass{pass_index}",
                        n=1,
                        harness=spec.harness.value,
                    )
                    if trajectory.error_class is not ErrorClass.RETRYABLE_INFRA or attempts > spec.infra_retries:
                        break
                wall = time.perf_counter() - started
                on_record(TrialRecord.from_trajectory(task, pass_index, trajectory, attempts, wall), trajectory)

        async with asyncio.TaskGroup() as group:
            for task, pass_index in todo:
                group.create_task(trial(task, pass_index))


def _counts(records: Sequence[TrialRecord]) -> dict[str, dict[str, int]]:
    return {
        "stop_reason": dict(Counter(r.stop_reason.value for r in records)),
        "error_class": dict(Counter(r.error_class.value if r.error_class else "none" for r in records)),
    }


def run_eval(spec: EvalSpec, progress: ProgressFn | None = None, tokenizer: Any = None) -> EvalResult:
    """Run (or resume) the eval ``spec`` and return its result; see the module docstring for what is written.

    ``tokenizer`` defaults to ``load_tokenizer(spec.engine)``; ``progress`` is called once before the first trial
    and after every finished one. Raises ``EvalConfigError`` for an eval that cannot run as configured — before any
    trial where it can be seen up front, else at the engine's first refusal.
    """
    started_at, started = datetime.now(UTC), time.perf_counter()
    tasks = spec.tasks.load()
    duplicates = [task_id for task_id, n in Counter(t.task_id for t in tasks).items() if n > 1]
    if duplicates:
        raise EvalConfigError(f"task ids occur more than once in the source: {', '.join(sorted(duplicates)[:5])}")
    harness = resolve_harness(spec)
    finished = _prepare_out_dir(spec, harness)
    planned = {(task.task_id, p) for task in tasks for p in range(spec.passes)}
    stray = [record.key for record in finished if record.key not in planned]
    if stray:
        raise EvalConfigError(f"{spec.out_dir / TRIALS_FILE} holds trials this spec does not plan, e.g. {stray[0]}")
    done_keys = {record.key for record in finished}
    todo = [(task, p) for p in range(spec.passes) for task in tasks if (task.task_id, p) not in done_keys]
    records = list(finished)
    total = len(planned)
    if todo:
        check_engine(spec, harness)
        tokenizer = tokenizer if tokenizer is not None else load_tokenizer(spec.engine)
    if progress:
        progress(Progress(done=len(records), total=total, resumed=len(finished), record=None))
    if todo:
        with (
            (spec.out_dir / TRIALS_FILE).open("a", encoding="utf-8") as trials_out,
            (spec.out_dir / TRAJECTORIES_FILE).open("a", encoding="utf-8") as trajectories_out,
        ):

            def on_record(record: TrialRecord, trajectory: Trajectory) -> None:
                # The trajectory first: a trial counts as finished only once its record line has landed.
                entry = {"pass_index": record.pass_index, "attempts": record.attempts}
                _append_line(trajectories_out, entry | {"trajectory": trajectory.model_dump(mode="json")})
                _append_line(trials_out, record.model_dump(mode="json"))
                records.append(record)
                if progress:
                    progress(Progress(done=len(records), total=total, resumed=len(finished), record=record))

            try:
                asyncio.run(_run_trials(spec, harness, tasks, todo, tokenizer, on_record))
            except* EngineRejected as rejected:
                raise EvalConfigError(
                    f"the engine at {spec.engine.base_url} rejected a request for {spec.engine.model!r}, so the eval "
                    f"stopped (nothing retried; finished trials are kept for a rerun): {rejected.exceptions[0]}. "
                    f"Check the harness settings, from {harness.origin()}, against what the engine serves"
                ) from None

    run_now = [r for r in records if r.key not in done_keys]
    result = EvalResult(
        spec=spec,
        summary=summarize([r.trial_result() for r in records]),
        counts=_counts(records),
        timings=EvalTimings(
            started_at=started_at.isoformat(timespec="seconds"),
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
            wall_s=time.perf_counter() - started,
            trials_run=len(run_now),
            trials_resumed=len(finished),
            mean_trial_wall_s=sum(r.wall_s for r in records) / len(records),
        ),
        harness=harness.settings,
        harness_source=harness.source,
        trials=sorted(records, key=lambda r: r.key),
    )
    atomic_write_text(spec.out_dir / RESULT_FILE, result.model_dump_json(indent=2))
    return result


def load_eval(out_dir: Path) -> EvalResult:
    """A finished eval from its folder: ``eval.json`` plus the trials of ``trials.jsonl``."""
    path = out_dir / RESULT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{out_dir} holds no {RESULT_FILE}: the eval did not finish (rerun it to resume)")
    result = EvalResult.model_validate_json(path.read_text())
    return result.model_copy(update={"trials": sorted(read_trials(out_dir / TRIALS_FILE), key=lambda r: r.key)})
