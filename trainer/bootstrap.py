"""The local profile's base model: a tiny Qwen3 taught by supervised imitation of (noisy) oracle trajectories.

No model hub is reachable, so the "pretrained base" that RL improves is built here, deterministically from a seed:

1. tasks: the data folder's tasks of ``spec.tiers`` whose oracles only use ``spec.apps`` (train split for training,
   both splits for the Pass@1 report);
2. traces: ``traces_per_task`` per train task, each the oracle's trace or — with the noise rates — a trace whose
   first call is a wrong tool / file / argument, answered with what that call really returned — or, when that call
   failed with an error, followed by the oracle's calls and answer (``recover_after_error``; ``trainer.traces``); a
   ``code_only_share`` of them recorded in the code-only harness (bash running the app CLI), and the bundled
   multiple-choice suite's questions with their answers (``mcq_examples_per_question``; ``trainer.mcq_examples``)
   and the bundled terminal tasks, each solved by its reference script in one ``bash`` call
   (``terminal_examples_per_task``; ``trainer.terminal_examples``) — what the transfer stage checks the trained policy
   can still do — and, with a team's own environment (``own_environment``), its probe calls on its train tasks
   (``probe_examples_per_task``; ``trainer.probe_examples``): tools the base has never seen, to explore;
3. tokenizer: byte-level BPE trained on the worlds' text files, the train prompts and the traces' text;
4. layout: every trace rendered exactly as its harness (compact tool listing) records a rollout; a few of each
   harness are replayed through ``run_agent`` and must match token for token;
5. model: ``build_tiny_model``, then next-token loss on assistant tokens only (``trainer.sft``);
6. report: Pass@1 per tier × split from real rollouts through our engine (``trainer.rollout_eval``).

Everything lands in ``<out>/<hash>/`` — a policy folder (``save_policy``) with its ``harness.json`` (the harness
and apps it is trained for, ``policy_harness``) plus ``bootstrap.json`` (spec, hash, steps, losses, timings, noise
counts, eval). The hash covers the spec, the environment's content digest (every world and task file) and
``BOOTSTRAP_VERSION``; a second call with the same inputs reads ``bootstrap.json`` and returns at once (writing the
``harness.json`` a folder from before it existed lacks).

The noise is what leaves room for RL: the clean and noisy traces of a prompt differ only in the call made, so the
base copies values well and picks the right call with probability ≈ 1 − Σ noise rates; GRPO can sharpen that choice.

    result = bootstrap(BootstrapSpec(seed=0), data=Path("data"), out=Path("models/base"), progress=print)
    model, tokenizer = load_policy(result.path)

Command: ``recipe model bootstrap [--data data] [--out models/base] [--seed 0] [--steps N]``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

from envs.apps import TOOLS, World
from envs.build import load_manifest, load_tasks
from envs.files import atomic_write_text, file_lock, replace_dir
from envs.harness.agent import HarnessConfig
from envs.harness.chat import compact_system_prompt
from envs.harness.code_tools import CODE_TOOLS, CodeToolSession, RegistryToolSession
from envs.harness.policy import PolicyHarness, read_policy_harness, write_policy_harness
from envs.harness.terminal import TERMINAL_TOOLS, bundled_terminal_tasks
from envs.harness.tool_formats import ToolFormatName
from envs.harness.tools import InProcessSession, LocalToolSession
from envs.oracle import require_oracle
from envs.sandbox.world_copy import fork_world
from envs.scratch import scratch_dir
from envs.types import Split, TaskSpec
from envs.worlds import world_index
from evals.mcq import BUNDLED_MCQ, McqRow, load_mcq
from evals.spec import HarnessKind
from trainer import terminal_examples
from trainer.engine import Engine, EngineConfig
from trainer.mcq_examples import corpus_texts, mcq_examples
from trainer.model import build_tiny_model, load_policy, save_policy
from trainer.probe_examples import PROBE_EXAMPLES_VERSION, ObservedProbe, observe_probes, probe_examples
from trainer.probe_examples import corpus_texts as probe_corpus
from trainer.rollout_eval import PassEval, PassRow, evaluate_pass_at_1
from trainer.sft import SftConfig, SftResult, train_sft
from trainer.specs import BootstrapSpec
from trainer.tokenizer import special_token_ids, train_tokenizer
from trainer.traces import (
    TokenizedTrace,
    Trace,
    check_parity,
    code_only_trace,
    copies_last_observation,
    draw_noise,
    noise_candidates,
    noisy_trace,
    oracle_trace,
    render_trace,
    swapped_trace,
)

BOOTSTRAP_VERSION = "bootstrap-v7"
"""Part of the cache key: bump it when tokenizer training, trace rendering or training change what they produce."""
REPORT_FILE = "bootstrap.json"
WORLD_TEXT_SUFFIXES = (".txt", ".md", ".csv", ".json")

Progress = Callable[[str], None]


class BootstrapReport(BaseModel):
    spec: BootstrapSpec
    hash: str
    version: str = BOOTSTRAP_VERSION
    train_tasks: int
    eval_tasks: int
    traces: int
    noise_counts: dict[str, int]  # "clean" and each NoiseKind, over the training traces
    mean_tokens: float
    steps_done: int
    stopped_early: bool
    losses: list[float]
    final_loss: float
    timings: dict[str, float]  # seconds per phase
    eval: list[PassRow] | None


@dataclass(frozen=True)
class BootstrapResult:
    path: Path  # the policy folder (load_policy(path)); bootstrap.json inside
    report: BootstrapReport
    cached: bool


def harness_config(spec: BootstrapSpec) -> HarnessConfig:
    """The harness the base is trained for and evaluated with: compact tool listing, short turns, the spec's
    tool-call dialect and thinking."""
    return HarnessConfig(
        tool_listing=spec.tool_listing,
        tool_format=spec.tool_format,
        thinking=spec.thinking,
        system_prompt=spec.system_prompt,
        max_turns=spec.max_turns,
        max_tokens_per_turn=spec.max_tokens_per_turn,
        context_budget_tokens=spec.model.max_position,
        temperature=1.0,
        seed=spec.seed,
        agent_timeout_s=120.0,
    )


def policy_harness(spec: BootstrapSpec) -> PolicyHarness:
    """The base's ``harness.json``: ``harness_config(spec)`` over ``spec.apps``, and the terminal harness's turn
    limit when the base was taught terminal tasks."""
    terminal_limit = spec.terminal_max_tokens_per_turn if spec.terminal_examples_per_task else None
    return PolicyHarness.from_training(harness_config(spec), spec.apps, terminal_limit)


def content_hash(spec: BootstrapSpec, data: Path) -> str:
    """sha256 over the version constant, the spec's JSON and the environment's content digest (16 hex)."""
    manifest = load_manifest(data)
    if manifest is None:
        raise FileNotFoundError(
            f"{data}/manifest.json is missing or outdated: build the environment first "
            f"(recipe envs generate --out {data})"
        )
    digest = hashlib.sha256(BOOTSTRAP_VERSION.encode())
    # A base taught no terminal tasks, or Hermes JSON without reasoning (the format before dialects existed: the same
    # traces, template and corpus), hashes as before those fields existed: its cached folder stays valid.
    terminal_fields = {"terminal_examples_per_task", "terminal_max_tokens_per_turn"}
    untaught = set() if spec.terminal_examples_per_task else terminal_fields
    if spec.tool_format is ToolFormatName.HERMES_JSON and spec.thinking is None:
        untaught |= {"tool_format", "thinking"}
    # The team's environment by content, not path; a base taught none hashes as before the field existed.
    untaught |= {"own_environment"} | (set() if spec.own_environment else {"probe_examples_per_task"})
    digest.update(spec.model_dump_json(exclude=untaught).encode())
    digest.update(manifest.content_digest.encode())
    if spec.own_environment is not None:
        own = load_manifest(spec.own_environment)
        if own is None:
            raise FileNotFoundError(f"{spec.own_environment}: no environment build there (manifest.json)")
        digest.update(own.content_digest.encode() + PROBE_EXAMPLES_VERSION.encode())
    return digest.hexdigest()[:16]


def offered_tools(apps: Sequence[str]) -> list[str]:
    """Registry names of the tools a session over ``apps`` offers (sorted, as ``LocalToolSession`` lists them)."""
    return sorted(name for name, tool in TOOLS.items() if tool.app in apps)


def select_tasks(tasks: Sequence[TaskSpec], spec: BootstrapSpec) -> list[TaskSpec]:
    """Tasks of ``spec.tiers`` whose oracle calls only tools of ``spec.apps``."""
    offered = set(offered_tools(spec.apps))
    chosen = [
        task
        for task in tasks
        if task.tier in spec.tiers
        and task.oracle
        and {step.tool for step in require_oracle(task).steps} <= offered
        and (spec.worlds is None or task.split is Split.HELDOUT or world_index(task.world_id) in spec.worlds)
    ]
    if not chosen:
        raise ValueError(f"no task of tiers {list(spec.tiers)} can be solved with the apps {list(spec.apps)}")
    return chosen


def scrambled_digits(value: str, rng: random.Random) -> str:
    """``value`` with every digit redrawn (signs, points and separators kept): a number of the same shape that no
    world holds, so copying it cannot be memorised."""
    return "".join(str(rng.randrange(10)) if ch.isdigit() else ch for ch in value)


def swap_value(rng: random.Random, donors: Sequence[str]) -> str:
    """Another task's value of the same kind; a number has its digits redrawn too (the tokenizer splits digits, so
    this is copy practice on sequences no world holds — what answering on held-out worlds needs)."""
    value = rng.choice(donors)
    return scrambled_digits(value, rng) if _is_number(value) else value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def draw_traces(
    task: TaskSpec, world: World, spec: BootstrapSpec, clean: Trace, values: Sequence[str] = ()
) -> list[Trace]:
    """``spec.traces_per_task`` traces of ``task``; each draws its noise kind and wrong call from its own seed.

    A clean or recovered trace is value-swapped with probability ``spec.value_swap``: its last observed value becomes
    another task's value of the same kind from ``values`` (a number with its digits redrawn, ``swap_value``). Each
    trace is then recorded in the code-only harness with probability ``spec.code_only_share`` (its own seed again).
    """
    offered = offered_tools(spec.apps)
    rates = spec.noise.by_kind()
    donors = (
        [v for v in values if _is_number(v) == _is_number(clean.answer) and v != clean.answer]
        if copies_last_observation(clean)
        else []
    )
    candidates = {kind: noise_candidates(task, world, kind, offered) for kind, rate in rates.items() if rate > 0}
    applicable = {kind for kind, calls in candidates.items() if calls}
    wrong: dict[str, Trace] = {}  # one tool call per distinct wrong call
    # A recovery adds the wrong call's turn before the oracle's calls and answer: it must fit the turn budget.
    recovers = len(clean.calls) + 2 <= spec.max_turns
    traces = []
    for index in range(spec.traces_per_task):
        rng = random.Random(f"{spec.seed}:{task.task_id}:{index}")
        kind = draw_noise(rng, rates, applicable)
        if kind is None:
            swap = donors and rng.random() < spec.value_swap
            traces.append(swapped_trace(clean, swap_value(rng, donors)) if swap else clean)
            continue
        call = rng.choice(candidates[kind])
        recover = recovers and rng.random() < spec.recover_after_error
        key = json.dumps([kind, call, recover], sort_keys=True)
        if key not in wrong:
            wrong[key] = noisy_trace(task, world, kind, call, clean if recover else None)
        trace = wrong[key]
        # A recovered trace ends as the clean one does (the oracle's calls, the value copied): swap it alike, or the
        # model memorises each task's value from these traces instead of copying it.
        recovered = len(trace.calls) > len(clean.calls)
        if recovered and donors and rng.random() < spec.value_swap:
            trace = swapped_trace(trace, swap_value(rng, donors))
        traces.append(trace)
    return in_harnesses(traces, task, spec)


def in_harnesses(traces: list[Trace], task: TaskSpec, spec: BootstrapSpec) -> list[Trace]:
    """``traces`` with a ``spec.code_only_share`` of them (seeded per task and index) in their code-only form; a
    trace drawn more than once stays one object per harness (rendered once)."""
    code_only: dict[int, Trace] = {}
    chosen = []
    for index, trace in enumerate(traces):
        if random.Random(f"{spec.seed}:{task.task_id}:{index}:harness").random() < spec.code_only_share:
            if id(trace) not in code_only:
                code_only[id(trace)] = code_only_trace(trace)
            trace = code_only[id(trace)]
        chosen.append(trace)
    return chosen


def _world_texts(worlds_root: Path) -> list[str]:
    return [
        path.read_text(errors="replace")
        for path in sorted(worlds_root.glob("*/filesystem/**/*"))
        if path.is_file() and path.suffix in WORLD_TEXT_SUFFIXES
    ]


def tokenizer_corpus(
    worlds_root: Path, tasks: Sequence[TaskSpec], traces: Sequence[Trace], system_text: str, config: HarnessConfig
) -> list[str]:
    """World text files, task prompts, the system prompt and every trace's assistant turns (as the policy of
    ``config`` writes them) and observations."""
    trace_texts = [text for trace in traces for text in trace.assistant_texts(config)]
    observations = [call.observation for trace in traces for call in trace.calls]
    return [*_world_texts(worlds_root), *(t.prompt for t in tasks), system_text, *trace_texts, *observations]


def _log(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def load_cached(out: Path, spec: BootstrapSpec, data: Path) -> BootstrapResult | None:
    """The finished bootstrap for these inputs, if ``<out>/<hash>/bootstrap.json`` exists.

    A folder written before policies carried ``harness.json`` gets it here: the settings follow from the spec alone,
    so the cache stays valid (rebuilding a base costs minutes).
    """
    path = out / content_hash(spec, data)
    report_file = path / REPORT_FILE
    if not report_file.is_file():
        return None
    if read_policy_harness(path) is None:
        write_policy_harness(path, policy_harness(spec))
    return BootstrapResult(path, BootstrapReport.model_validate_json(report_file.read_text()), cached=True)


def bootstrap(spec: BootstrapSpec, data: Path, out: Path, progress: Progress | None = None) -> BootstrapResult:
    """Build (or reuse) the base model for ``spec`` over the environment in ``data``; see the module docstring.

    Runs share the cache: the base is built by one process at a time (a lock per key; another waits, then finds it
    built) in a staging folder, and published whole with its report, so ``<out>/<hash>/`` is complete or absent — a
    run killed mid-build (or mid-evaluation) leaves nothing a later run would take for a finished base."""
    cached = load_cached(out, spec, data)
    if cached is not None:
        _log(progress, f"cached base model: {cached.path}{_cut_short(cached.report)}")
        return cached
    key = content_hash(spec, data)
    with file_lock(out / f".{key}.lock"):
        cached = load_cached(out, spec, data)
        if cached is not None:  # another run built it while this one waited
            _log(progress, f"cached base model (built by another run meanwhile): {cached.path}")
            return cached
        staging = out / f".{key}.building"
        shutil.rmtree(staging, ignore_errors=True)  # what a killed build left (the lock says no build runs now)
        report = _build(spec, data, key, staging, progress)
        replace_dir(staging, out / key)
    return BootstrapResult(out / key, report, cached=False)


def _cut_short(report: BootstrapReport) -> str:
    """A warning when the cached base stopped at its wall-clock limit: a build on an idle machine trains every step
    under the same key, so this base differs from the one a fresh checkout gets (delete the folder to rebuild it)."""
    if not report.stopped_early:
        return ""
    return (
        f" — WARNING: its training stopped at the {report.spec.max_wall_seconds:g} s wall limit after step "
        f"{report.steps_done} of {report.spec.steps}; delete the folder to rebuild it whole"
    )


def _build(spec: BootstrapSpec, data: Path, key: str, path: Path, progress: Progress | None) -> BootstrapReport:
    """Tokenizer, model, training, evaluation and report, all into ``path``."""
    worlds_root = data / "worlds"
    started = time.perf_counter()
    tasks = select_tasks(load_tasks(data), spec)
    imitation = draw_imitation_set(tasks, worlds_root, spec)
    timings = {"traces_s": time.perf_counter() - started}
    if imitation.probes:
        _log(progress, f"{len(imitation.probes)} probe calls of {spec.own_environment} to teach")
    n_traces, n_tasks = len(imitation.traces), len(imitation.tasks_by_id)
    _log(progress, f"{n_traces} traces of {n_tasks} train tasks in {timings['traces_s']:.1f} s")

    mark = time.perf_counter()
    tokenized = tokenize_imitation_set(imitation, spec)
    timings["tokenize_s"] = time.perf_counter() - mark
    tokenizer, mean_tokens = tokenized.tokenizer, tokenized.mean_tokens
    _log(progress, f"tokenizer {len(tokenizer)} tokens; traces average {mean_tokens:.0f} tokens; parity checked")

    mark = time.perf_counter()
    model, result = train_base(tokenized, spec, progress)
    timings["train_s"] = time.perf_counter() - mark
    save_policy(model, tokenizer, path, harness=policy_harness(spec))

    mark = time.perf_counter()
    rows = evaluate_policy(path, tasks, worlds_root, spec) if spec.eval_samples else None
    timings["eval_s"] = time.perf_counter() - mark
    timings["total_s"] = time.perf_counter() - started
    noise_counts = Counter(str(trace.noise or "clean") for trace in imitation.traces)
    report = BootstrapReport(
        spec=spec,
        hash=key,
        train_tasks=n_tasks,
        eval_tasks=len(tasks) if rows else 0,
        traces=n_traces,
        noise_counts=dict(sorted(noise_counts.items())),
        mean_tokens=mean_tokens,
        steps_done=result.steps_done,
        stopped_early=result.stopped_early,
        losses=result.losses,
        final_loss=result.final_loss,
        timings={name: round(seconds, 2) for name, seconds in timings.items()},
        eval=rows,
    )
    atomic_write_text(path / REPORT_FILE, report.model_dump_json(indent=2))
    return report


@dataclass(frozen=True)
class ImitationSet:
    """What the base imitates: the train tasks (by id), every drawn trace in task order, the tool listing of each
    harness and the harness settings they are rendered with, and the multiple-choice rows and terminal tasks it is
    taught; ``worlds_root`` holds the pristine worlds the parity replays fork."""

    tasks_by_id: dict[str, TaskSpec]
    traces: list[Trace]
    tool_specs: dict[HarnessKind, list[dict[str, Any]]]
    config: HarnessConfig
    worlds_root: Path
    mcq_rows: list[McqRow]
    terminal_tasks: list[TaskSpec]
    probes: list[ObservedProbe] = field(default_factory=list)
    """A team's environment's probe calls, each with a train task of its world (``trainer.probe_examples``)."""


@dataclass(frozen=True)
class TokenizedImitation:
    """The tokenizer trained for an ``ImitationSet`` and its traces rendered as training examples (one per trace, then
    the multiple-choice and terminal examples; a trace drawn more than once is rendered once, ``rendered`` by object
    id)."""

    tokenizer: PreTrainedTokenizerFast
    examples: list[TokenizedTrace]
    rendered: dict[int, TokenizedTrace]

    @property
    def mean_tokens(self) -> float:
        return sum(len(e.tokens) for e in self.examples) / len(self.examples)


def draw_imitation_set(tasks: Sequence[TaskSpec], worlds_root: Path, spec: BootstrapSpec) -> ImitationSet:
    """Steps 1-2: the train tasks among ``tasks`` (``spec.train_task_limit`` first ones) and ``draw_traces`` of each,
    on world copies that are gone when this returns."""
    train_tasks = [task for task in tasks if task.split is Split.TRAIN][: spec.train_task_limit]
    if not train_tasks:
        raise ValueError(f"no train-split task among the {len(tasks)} selected tasks")
    with scratch_dir("bootstrap-worlds-") as scratch:
        worlds = {
            task.task_id: World(fork_world(worlds_root / task.world_id, Path(scratch) / task.task_id))
            for task in train_tasks
        }
        clean = {task.task_id: oracle_trace(task, worlds[task.task_id]) for task in train_tasks}
        values = sorted({trace.answer for trace in clean.values() if copies_last_observation(trace)})
        traces = [
            trace
            for task in train_tasks
            for trace in draw_traces(task, worlds[task.task_id], spec, clean[task.task_id], values)
        ]
    return ImitationSet(
        tasks_by_id={task.task_id: task for task in train_tasks},
        traces=traces,
        tool_specs=asyncio.run(list_tool_specs(spec.apps)),
        config=harness_config(spec),
        worlds_root=worlds_root,
        mcq_rows=load_mcq(BUNDLED_MCQ) if spec.mcq_examples_per_question else [],
        terminal_tasks=bundled_terminal_tasks() if spec.terminal_examples_per_task else [],
        probes=_observed_probes(spec),
    )


def _observed_probes(spec: BootstrapSpec) -> list[ObservedProbe]:
    """The probe calls of ``spec.own_environment`` on its train tasks' worlds (the first ``train_task_limit``)."""
    if spec.own_environment is None or not spec.probe_examples_per_task:
        return []
    own = [task for task in load_tasks(spec.own_environment) if task.split is Split.TRAIN][: spec.train_task_limit]
    return observe_probes(own, spec.own_environment / "worlds")


def tokenize_imitation_set(imitation: ImitationSet, spec: BootstrapSpec) -> TokenizedImitation:
    """Steps 3-4: train the tokenizer on the corpus, render every trace as the harness would, and replay a sample
    through ``run_agent`` to check the layout token for token."""
    config = imitation.config
    system_texts = [
        compact_system_prompt(config.system_prompt, specs, config.tool_listing, config.tool_format)
        for harness, specs in imitation.tool_specs.items()
        if harness is HarnessKind.MCP or any(trace.harness is harness for trace in imitation.traces)
    ]
    train_tasks = list(imitation.tasks_by_id.values())
    corpus = tokenizer_corpus(imitation.worlds_root, train_tasks, imitation.traces, "\n".join(system_texts), config)
    terminal_texts = terminal_examples.corpus_texts(imitation.terminal_tasks, config)
    if imitation.terminal_tasks:
        specs = imitation.tool_specs[HarnessKind.TERMINAL]
        terminal_texts.append(
            compact_system_prompt(config.system_prompt, specs, config.tool_listing, config.tool_format)
        )
    texts = [*corpus, *corpus_texts(imitation.mcq_rows), *terminal_texts, *probe_corpus(imitation.probes, config)]
    tokenizer = train_tokenizer(texts, spec.vocab_size, spec.tool_format)
    rendered: dict[int, TokenizedTrace] = {}  # traces repeat (clean ones): render each distinct object once
    examples = []
    for trace in imitation.traces:
        if id(trace) not in rendered:
            task = imitation.tasks_by_id[trace.task_id]
            rendered[id(trace)] = render_trace(tokenizer, task, trace, imitation.tool_specs[trace.harness], config)
        examples.append(rendered[id(trace)])
    examples += mcq_examples(tokenizer, imitation.mcq_rows, spec.mcq_examples_per_question, config)
    # Recorded with the turn limit the base's harness.json gives the terminal harness (policy_harness).
    terminal_config = policy_harness(spec).for_terminal().harness
    examples += terminal_examples.terminal_examples(
        tokenizer, imitation.terminal_tasks, terminal_config, spec.terminal_examples_per_task
    )
    if imitation.probes:
        assert spec.own_environment is not None  # probes come from it
        own_worlds = spec.own_environment / "worlds"
        examples += probe_examples(tokenizer, imitation.probes, own_worlds, config, spec.probe_examples_per_task)
    tokenized = TokenizedImitation(tokenizer, examples, rendered)
    asyncio.run(_check_parity_sample(imitation, tokenized, spec))
    return tokenized


def train_base(
    tokenized: TokenizedImitation, spec: BootstrapSpec, progress: Progress | None
) -> tuple[Qwen3ForCausalLM, SftResult]:
    """Step 5: a fresh tiny model (seeded by ``spec.seed``) trained on the examples' assistant tokens."""
    tokenizer = tokenized.tokenizer
    model = build_tiny_model(
        spec.model.model_copy(update={"seed": spec.seed}), len(tokenizer), special_token_ids(tokenizer)
    )
    sft = SftConfig(
        steps=spec.steps,
        batch_size=spec.batch_size,
        lr=spec.lr,
        warmup_steps=spec.warmup_steps,
        seed=spec.seed,
        max_wall_seconds=spec.max_wall_seconds,
        log_every=spec.log_every,
    )
    result = train_sft(model, tokenized.examples, sft, progress=progress)
    return model, result


async def list_tool_specs(apps: Sequence[str]) -> dict[HarnessKind, list[dict[str, Any]]]:
    """The ``{name, description, input_schema}`` listing each harness's tool session shows the policy: the app
    tools of ``apps``, the code-only tools and the terminal harness's ``bash``."""
    # The listings do not depend on the world; a session over an empty one gives the names and schemas.
    return {
        HarnessKind.MCP: await LocalToolSession(World(Path(".")), apps=apps).list_tools(),
        HarnessKind.CODE_ONLY: await RegistryToolSession(CODE_TOOLS).list_tools(),
        HarnessKind.TERMINAL: await RegistryToolSession(TERMINAL_TOOLS).list_tools(),
    }


PARITY_SESSIONS: dict[HarnessKind, Callable[[World, Sequence[str]], InProcessSession]] = {
    HarnessKind.MCP: lambda world, apps: LocalToolSession(world, apps=apps),
    HarnessKind.CODE_ONLY: lambda world, apps: CodeToolSession(world.root),
}
"""The real tool session a replayed trace of each harness runs against (over a private world copy)."""


async def _check_parity_sample(imitation: ImitationSet, tokenized: TokenizedImitation, spec: BootstrapSpec) -> None:
    """Replay the first ``parity_checks`` distinct traces of each harness, noisy ones first, on fresh world copies."""
    distinct = list({id(trace): trace for trace in imitation.traces}.values())
    # A swapped trace shows a value the world does not hold: replaying it against real tools must differ.
    replayable = [trace for trace in distinct if not trace.swapped]
    sample = [
        trace
        for harness in PARITY_SESSIONS
        for trace in sorted(
            (trace for trace in replayable if trace.harness is harness), key=lambda trace: trace.noise is None
        )[: spec.parity_checks]
    ]
    with scratch_dir("bootstrap-parity-") as scratch:
        for index, trace in enumerate(sample):
            task = imitation.tasks_by_id[trace.task_id]
            world = World(fork_world(imitation.worlds_root / task.world_id, Path(scratch) / str(index)))
            session = PARITY_SESSIONS[trace.harness](world, spec.apps)
            rendered = tokenized.rendered[id(trace)]
            await check_parity(tokenized.tokenizer, task, trace, rendered, session, imitation.config)


def evaluate_policy(policy: Path, tasks: Sequence[TaskSpec], worlds_root: Path, spec: BootstrapSpec) -> list[PassRow]:
    """Pass@1 rows of the saved policy (loaded back, so the artifact itself is what is measured)."""
    model, tokenizer = load_policy(policy)
    engine = Engine(model, tokenizer, EngineConfig(max_num_seqs=64, max_model_len=spec.model.max_position))
    try:
        return asyncio.run(
            evaluate_pass_at_1(
                engine, tokenizer, tasks, PassEval(worlds_root, spec.apps, harness_config(spec), n=spec.eval_samples)
            )
        )
    finally:
        engine.close()
