"""Oracle traces for supervised bootstrapping: scripted tool-call trajectories, controlled noise, harness token layout.

A ``Trace`` is what an agent did on a task: its tool calls in order (MCP names, e.g. ``sheets_read_cell``), the real
text each call returned on a private world copy, and its final answer. ``oracle_trace`` runs the task's oracle;
``noisy_trace`` makes the first call wrong in one controlled way and answers with what that wrong call returned:

==================  ===================================================================================================
noise kind          the first call becomes
==================  ===================================================================================================
wrong_tool          another offered tool that accepts exactly the same arguments (read_cell ↔ read_formula, …)
wrong_file          the same call on another file of the world with the same extension
wrong_argument      a neighbouring ``cell`` or another ``sheet`` of the workbook; a call whose only argument is a path
                    gets the same file name under another top-level folder (a missing file)
==================  ===================================================================================================

The noisy answer is the observation's text, stripped — exactly what the oracle does with an output it saves without a
pattern — so the model learns to copy whatever it read, and only the choice of call decides the reward: the part RL
can fix. A wrong call that *fails* (a missing file or sheet: the tool answers with an error) is, with ``recovery``,
followed by the oracle's own calls and answer: an agent reads an explicit error and tries again, while a silently
wrong value has nothing to recover from. Those traces are what makes the base's rollouts multi-turn (the TITO check
needs rollouts with two or more tool calls).

``code_only_trace`` records the same trace as the code-only harness would (each app call a ``bash`` line of the app
CLI, its output framed as the bash tool frames it): the base learns that harness too, so the transfer stage's
code-only suite measures something the base can lose.

``render_trace`` lays a trace out token by token exactly as ``envs.harness.agent.run_agent`` builds a rollout that
sampled the same assistant text (``chat.prompt_ids`` + sampled ids + EOS + ``turn_close_ids`` + ``delta_ids`` …);
``check_parity`` replays the trace through ``run_agent`` itself and raises if the two differ.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from envs.apps import TOOLS, ToolError, World, call_tool, tool_schema
from envs.apps.code_exec import ExecResult
from envs.harness.agent import AgentSetup, HarnessConfig, run_agent, truncate_tool_result
from envs.harness.chat import (
    delta_ids,
    encode,
    eos_token_id,
    initial_messages,
    prompt_ids,
    tool_result_message,
    turn_close_ids,
)
from envs.harness.code_tools import DEFAULT_BASH_TIMEOUT_S, app_cli_command
from envs.harness.engine_client import Completion, Sampling
from envs.harness.tool_formats import TOOL_FORMATS, ToolFormatName
from envs.harness.tools import InProcessSession
from envs.mcp.servers import mcp_name
from envs.oracle import require_oracle, run_oracle, substitute
from envs.types import GradeResult, TaskSpec
from evals.spec import HarnessKind
from trainer.specs import NoiseKind

DEFAULT_HARNESS = HarnessConfig()
ANSWER_THOUGHT = "I have what the task asks for."
"""The reasoning a thinking policy's bootstrap traces open their answer turn with (each call's: which tool is next)."""


@dataclass(frozen=True)
class TraceCall:
    tool: str  # registry name, e.g. "sheets.read_cell", or a code-only tool's name ("bash")
    args: dict[str, Any]
    observation: str  # the text the model reads (a tool error's message when it failed)
    failed: bool = False  # the tool answered with an error


@dataclass(frozen=True)
class Trace:
    task_id: str
    calls: tuple[TraceCall, ...]
    answer: str
    noise: NoiseKind | None = None
    swapped: bool = False  # the last observation (and so the answer) was replaced: not what the world returns
    harness: HarnessKind = HarnessKind.MCP  # MCP: the app tools RL trains with; CODE_ONLY: bash over the app CLI

    def assistant_texts(self, config: HarnessConfig = DEFAULT_HARNESS) -> list[str]:
        """One text per assistant turn as the policy of ``config`` writes it: each call in its dialect, then the
        answer; with thinking on, each turn opens with its reasoning (``turn_text``)."""
        calls = [
            turn_text(
                tool_call_text(call.tool, call.args, config.tool_format), f"Next I call {called(call.tool)}.", config
            )
            for call in self.calls
        ]
        return [*calls, turn_text(self.answer, ANSWER_THOUGHT, config)]


@dataclass(frozen=True)
class TokenizedTrace:
    tokens: list[int]
    loss_mask: list[int]  # 1 = assistant (model-generated) token


def tool_call_text(tool: str, args: Mapping[str, Any], tool_format: ToolFormatName = ToolFormatName.HERMES_JSON) -> str:
    """The assistant text of one call in ``tool_format`` (an app tool by its MCP name, a code-only tool by its own):
    ``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`` in Hermes JSON."""
    return TOOL_FORMATS[tool_format].call_text(called(tool), args)


def called(tool: str) -> str:
    """The name the model calls a tool by: an app tool's MCP name, a code-only tool's own."""
    return mcp_name(tool) if tool in TOOLS else tool


def turn_text(text: str, thought: str, config: HarnessConfig) -> str:
    """An assistant turn as a policy with ``config.thinking`` on writes it: its reasoning in ``<think>`` first (the
    tokens are sampled and trained on; the harness drops them before parsing)."""
    return f"<think>\n{thought}\n</think>\n\n{text}" if config.thinking else text


def observe(world: World, tool: str, args: Mapping[str, Any]) -> str:
    """What the model reads after a call: the tool's text, or its error message (as ``LocalToolSession`` reports)."""
    return observed_call(world, tool, args).observation


def observed_call(world: World, tool: str, args: Mapping[str, Any]) -> TraceCall:
    """The call with what it returned, and whether that was an error."""
    try:
        text = call_tool(world, tool, dict(args))
    except ToolError as error:
        return TraceCall(tool, dict(args), str(error), failed=True)
    return TraceCall(tool, dict(args), "" if text is None else str(text))


def oracle_trace(task: TaskSpec, world: World) -> Trace:
    """Run the task's oracle on ``world`` (a private copy) and record every call with its output."""
    calls: list[TraceCall] = []

    def record(tool: str, args: dict[str, Any]) -> str:
        output = call_tool(world, tool, args)  # an oracle step that fails is a broken task: let it raise
        calls.append(TraceCall(tool, args, "" if output is None else str(output)))
        return calls[-1].observation

    run = run_oracle(require_oracle(task), record)
    if run.answer is None:
        raise ValueError(f"task {task.task_id}: its oracle gives no final answer to imitate")
    return Trace(task.task_id, tuple(calls), run.answer)


def copies_last_observation(trace: Trace) -> bool:
    """The answer is the last observation, stripped: the toy tier's shape, where the answer is copied, not computed."""
    return bool(trace.calls) and trace.answer == trace.calls[-1].observation.strip() != ""


def swapped_trace(trace: Trace, value: str) -> Trace:
    """``trace`` with its last observation replaced by ``value`` and the answer following it.

    Clean traces of one task always show the same value, which a tiny model can memorise per prompt instead of copying
    from the observation; showing other tasks' values in the same slot makes copying the only way to fit them, so the
    base also answers right on worlds it never saw.
    """
    if not copies_last_observation(trace):
        raise ValueError(f"task {trace.task_id}: its answer is not its last observation, so it cannot be swapped")
    last = trace.calls[-1]
    calls = (*trace.calls[:-1], TraceCall(last.tool, last.args, value))
    return Trace(trace.task_id, calls, value.strip(), trace.noise, swapped=True)


def code_only_trace(trace: Trace) -> Trace:
    """``trace`` as the code-only harness records it: each app call a ``bash`` line of the app CLI
    (``app_cli_command``), its observation what the bash tool shows for that run; the answer is unchanged."""
    if trace.harness is not HarnessKind.MCP:
        raise ValueError(f"task {trace.task_id}: only an app-tool trace has a code-only form")
    calls = tuple(
        TraceCall("bash", {"command": app_cli_command(call.tool, call.args)}, _cli_output(call), call.failed)
        for call in trace.calls
    )
    return dataclasses.replace(trace, calls=calls, harness=HarnessKind.CODE_ONLY)


def _cli_output(call: TraceCall) -> str:
    """The bash tool's text for the app CLI running ``call``: it prints the tool's output (exit 0) or the tool error
    (stderr, exit 1) — ``envs/apps/__main__``."""
    exit_code, stdout, stderr = (1, "", f"{call.observation}\n") if call.failed else (0, f"{call.observation}\n", "")
    result = ExecResult(exit_code, stdout, stderr, timed_out=False, duration_s=0.0, wall_s=DEFAULT_BASH_TIMEOUT_S)
    return result.render(DEFAULT_BASH_TIMEOUT_S)


# --- noise -----------------------------------------------------------------------------------------------------------

Candidates = Callable[[World, str, dict[str, Any], Sequence[str]], list[tuple[str, dict[str, Any]]]]
"""(world, tool, args, offered tools) → the wrong calls of one noise kind, in a fixed order."""


def _accepts_exactly(tool: str, args: Mapping[str, Any]) -> bool:
    schema = tool_schema(tool)
    return set(args) <= set(schema.get("properties", {})) and set(schema.get("required", ())) <= set(args)


def _wrong_tools(world: World, tool: str, args: dict[str, Any], offered: Sequence[str]) -> list[tuple[str, dict]]:
    return [(other, args) for other in offered if other != tool and _accepts_exactly(other, args)]


def _files(world: World) -> list[str]:
    return sorted(p.relative_to(world.fs_root).as_posix() for p in world.fs_root.rglob("*") if p.is_file())


def _wrong_files(world: World, tool: str, args: dict[str, Any], offered: Sequence[str]) -> list[tuple[str, dict]]:
    path = args.get("path")
    if not isinstance(path, str):
        return []
    suffix = Path(path).suffix
    return [
        (tool, {**args, "path": other}) for other in _files(world) if other != path and Path(other).suffix == suffix
    ]


_COLUMN_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _neighbour_cells(world: World, args: dict[str, Any]) -> list[str]:
    """The cells above, below, left and right of a one-letter-column reference (``B12`` → B11, B13, A12, C12)."""
    cell = str(args["cell"]).upper()
    column, row = cell[:1], cell[1:]
    if column not in _COLUMN_LETTERS or not row.isdigit():
        return []
    index, number = _COLUMN_LETTERS.index(column), int(row)
    moves = [(0, -1), (0, 1), (-1, 0), (1, 0)]
    return [
        f"{_COLUMN_LETTERS[index + dc]}{number + dr}"
        for dc, dr in moves
        if 0 <= index + dc < len(_COLUMN_LETTERS) and number + dr >= 1
    ]


def _other_sheets(world: World, args: dict[str, Any]) -> list[str]:
    """The workbook's other sheet names (``sheets.list_sheets`` prints ``Name (A1:F20)`` per line)."""
    listing = observe(world, "sheets.list_sheets", {"path": args["path"]})
    names = [line.rsplit(" (", 1)[0] for line in listing.splitlines() if line.endswith(")")]
    return [name for name in names if name != args["sheet"]]


ARGUMENT_PERTURBERS: dict[str, Callable[[World, dict[str, Any]], list[str]]] = {
    "cell": _neighbour_cells,
    "sheet": _other_sheets,
}


def _moved_paths(world: World, path: str) -> list[str]:
    """The file name under every other top-level folder of the filesystem (where it does not exist)."""
    folders = sorted(p.name for p in world.fs_root.iterdir() if p.is_dir())
    name, top = Path(path).name, Path(path).parts[0]
    return [f"{folder}/{name}" for folder in folders if folder != top and not (world.fs_root / folder / name).exists()]


def _wrong_arguments(world: World, tool: str, args: dict[str, Any], offered: Sequence[str]) -> list[tuple[str, dict]]:
    perturbed = [
        (tool, {**args, name: value})
        for name, perturb in ARGUMENT_PERTURBERS.items()
        if name in args
        for value in perturb(world, args)
    ]
    if perturbed or set(args) != {"path"}:
        return perturbed
    return [(tool, {"path": moved}) for moved in _moved_paths(world, args["path"])]


NOISE_CANDIDATES: dict[NoiseKind, Candidates] = {
    NoiseKind.WRONG_TOOL: _wrong_tools,
    NoiseKind.WRONG_FILE: _wrong_files,
    NoiseKind.WRONG_ARGUMENT: _wrong_arguments,
}


def noise_candidates(task: TaskSpec, world: World, kind: NoiseKind, offered: Sequence[str]) -> list[tuple[str, dict]]:
    """The wrong first calls of ``kind`` for ``task`` (the oracle's first step, references substituted)."""
    first = require_oracle(task).steps[0]
    return NOISE_CANDIDATES[kind](world, first.tool, substitute(first.args, {}), offered)


def noisy_trace(
    task: TaskSpec, world: World, kind: NoiseKind, call: tuple[str, dict[str, Any]], recovery: Trace | None = None
) -> Trace:
    """One wrong call (a ``noise_candidates`` entry) and its real observation; answered with that observation, or —
    when the call failed and a ``recovery`` trace (the task's oracle trace) is given — followed by its calls and
    answer."""
    wrong = observed_call(world, *call)
    if wrong.failed and recovery is not None:
        return Trace(task.task_id, (wrong, *recovery.calls), recovery.answer, kind)
    return Trace(task.task_id, (wrong,), wrong.observation.strip(), kind)


def draw_noise(rng: random.Random, rates: Mapping[NoiseKind, float], applicable: set[NoiseKind]) -> NoiseKind | None:
    """Clean with probability 1 − Σ rates, else a noise kind with probability ∝ its rate.

    A kind that has no candidate for this task is redrawn among the applicable kinds (∝ their rates), so the total
    noise rate holds for every task; with no applicable kind the trace stays clean.
    """
    u = rng.random()
    if u >= sum(rates.values()):
        return None
    choices = [(kind, rate) for kind, rate in rates.items() if kind in applicable and rate > 0]
    if not choices:
        return None
    return rng.choices([kind for kind, _ in choices], weights=[rate for _, rate in choices])[0]


# --- token layout ----------------------------------------------------------------------------------------------------


def render_trace(
    tokenizer: PreTrainedTokenizerBase,
    task: TaskSpec,
    trace: Trace,
    tools: Sequence[Mapping[str, Any]],
    config: HarnessConfig,
) -> TokenizedTrace:
    """The token ids and loss mask ``run_agent`` would record if the model sampled exactly this trace's text.

    prompt_ids(system + task) | encode(turn) + EOS (mask 1) | turn_close_ids + delta_ids(observation) | …
    | encode(answer) + EOS (mask 1). A turn longer than ``config.max_tokens_per_turn`` is refused (``ValueError``).
    """
    eos, close = eos_token_id(tokenizer), turn_close_ids(tokenizer)
    messages = initial_messages(config.system_prompt, task.prompt)
    tokens = prompt_ids(tokenizer, messages, tools, config.tool_listing, config.tool_format, config.thinking)
    mask = [0] * len(tokens)
    for turn, text in enumerate(trace.assistant_texts(config)):
        sampled = [*encode(tokenizer, text), eos]
        if len(sampled) > config.max_tokens_per_turn:  # the policy could never sample it: imitating it teaches nothing
            raise ValueError(
                f"task {trace.task_id} ({trace.harness} harness): an assistant turn is {len(sampled)} tokens, more "
                f"than max_tokens_per_turn={config.max_tokens_per_turn}; raise it or vocab_size: {text[:120]!r}"
            )
        tokens += sampled
        mask += [1] * len(sampled)
        if turn < len(trace.calls):
            shown = truncate_tool_result(trace.calls[turn].observation, config.tool_result_max_chars)
            observation = close + delta_ids(tokenizer, [tool_result_message(shown)], config.thinking)
            tokens += observation
            mask += [0] * len(observation)
    return TokenizedTrace(tokens, mask)


class ReplayEngine:
    """A ``CompletionEngine`` that answers turn k with the k-th scripted id list (logprob 0, finish "stop")."""

    def __init__(self, turns_ids: Sequence[Sequence[int]]) -> None:
        self._turns = [list(ids) for ids in turns_ids]
        self._next = 0

    async def complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion:
        if self._next >= len(self._turns):
            raise RuntimeError(f"the replayed trace has only {len(self._turns)} assistant turns")
        ids = self._turns[self._next]
        self._next += 1
        return Completion(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")


class ParityError(AssertionError):
    """The training layout of a trace differs from what the harness builds for the same assistant text."""


async def check_parity(
    tokenizer: PreTrainedTokenizerBase,
    task: TaskSpec,
    trace: Trace,
    rendered: TokenizedTrace,
    session: InProcessSession,
    config: HarnessConfig,
) -> None:
    """Replay ``trace`` through ``run_agent`` with ``session`` (real tools over a private world copy, of the trace's
    harness) and compare token for token."""
    eos = eos_token_id(tokenizer)
    engine = ReplayEngine([[*encode(tokenizer, text), eos] for text in trace.assistant_texts(config)])
    async with session as tools:
        trajectory = await run_agent(
            task,
            tools,
            AgentSetup(engine, tokenizer, config),
            grade_fn=lambda answer: GradeResult(criteria=[], score=0.0, passed=False),
            group_id=f"parity-{task.task_id}",
        )
    if trajectory.final_answer != trace.answer.strip():
        raise ParityError(
            f"{task.task_id}: the harness read the answer {trajectory.final_answer!r}, not {trace.answer!r} "
            f"(stop {trajectory.stop_reason}: {trajectory.error})"
        )
    if trajectory.tokens != rendered.tokens or trajectory.loss_mask != rendered.loss_mask:
        first = next(
            (i for i, pair in enumerate(zip(trajectory.tokens, rendered.tokens, strict=False)) if pair[0] != pair[1]),
            min(len(trajectory.tokens), len(rendered.tokens)),
        )
        raise ParityError(
            f"{task.task_id}: training tokens differ from the harness's rollout from position {first} "
            f"({len(rendered.tokens)} vs {len(trajectory.tokens)} tokens)"
        )
