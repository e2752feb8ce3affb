"""The TITO check (RECIPE "TITO"): the tokens the trainer trains on are exactly the tokens the engine sampled.

Re-tokenising chat text makes training silently off-policy in two ways: the ids the engine sampled differ from the
ids the trainer sees after decode → encode, and turn N's output differs from the same span inside turn N+1's
input. ``RecordingEngine`` wraps any ``CompletionEngine`` (our engine in-process or over HTTP, vLLM) and keeps every
(prompt ids, completion) it answered; ``check_tito`` then holds each trajectory against those records:

* **prompt** — each turn's request was exactly the trajectory's tokens before that turn's span (history never
  re-rendered), and it extends the previous request's prompt + completion (turn N is a prefix of turn N+1);
* **sampled** — the span holds exactly the ids and logprobs the engine returned;
* **loss_mask** — mask 1 on exactly the sampled spans, 0 everywhere else;
* **trainer** — ``TrainBatch.from_trajectories`` (what ``LocalTrainer`` consumes) holds the same ids, mask and
  rollout logprobs, row for row.

Beside the misalignments (the gate wants zero) it measures what a chat-completions harness would have trained on:

* ``drift_rate`` — the share of sampled turns whose decode → encode round trip would have given other ids;
* ``rerender_changed`` — per rollout, the sampled tokens a chat-template re-render of the conversation would drop or
  change (``rerendered_turn_ids``): each assistant turn held as a chat client holds it — the calls parsed out as
  ``tool_calls``, the text around them as content, the reasoning kept or stripped as the family's template does
  (``harness.reasoning_in_history``) — and rendered back by the tokenizer's template. Reasoning a template strips,
  whitespace it normalises around a call, a separator it writes differently: each shows up here.

    engine = RecordingEngine(client)
    trajectories = await run_group(task, envs, AgentSetup(engine, tokenizer, config), group_id="g", n=4)
    report = check_tito(trajectories, engine.exchanges, tokenizer)
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from difflib import SequenceMatcher
from typing import Any

from transformers import PreTrainedTokenizerBase

from envs.harness.chat import encode, render
from envs.harness.config import HarnessConfig
from envs.harness.engine_client import Completion, CompletionEngine, Sampling
from envs.harness.parsing import strip_think
from envs.harness.tool_formats import TOOL_FORMATS
from envs.types import Trajectory
from trainer.algorithms import AlgorithmConfig
from trainer.local.batch import TrainBatch

MAX_LISTED = 20
_USER = ({"role": "user", "content": "U"},)
_THOUGHT = re.compile(r"\s*<think>\n?(.*?)\n?</think>", re.DOTALL)
"""The reasoning a turn opens with (what vLLM's ``qwen3`` reasoning parser returns as ``reasoning_content``)."""
"""A fixed conversation an assistant turn is re-rendered after."""


@dataclass(frozen=True)
class Exchange:
    prompt_ids: tuple[int, ...]
    completion: Completion


class RecordingEngine:
    """A ``CompletionEngine`` that forwards to ``inner`` and records every exchange."""

    def __init__(self, inner: CompletionEngine) -> None:
        self.inner = inner
        self.exchanges: list[Exchange] = []

    async def complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion:
        completion = await self.inner.complete(prompt_ids, sampling)
        self.exchanges.append(Exchange(tuple(prompt_ids), completion))
        return completion


class RetokenizingEngine:
    """The defect TITO exists to catch (``Defect.RETOKENIZING_HARNESS``): a harness that keeps the conversation as
    text. Each request's prompt is decoded and re-tokenised before it is sent, and the completion's ids are decoded and
    re-tokenised before the trajectory keeps them (logprobs cut or zero-padded to the new length), as a
    chat-completions client rebuilding the history from rendered text would. Wherever the round trip is not the
    identity, the trajectory no longer holds what crossed the wire."""

    def __init__(self, inner: CompletionEngine, tokenizer: PreTrainedTokenizerBase) -> None:
        self.inner, self.tokenizer = inner, tokenizer

    def _round_trip(self, ids: Sequence[int]) -> list[int]:
        return encode(self.tokenizer, self.tokenizer.decode(ids))

    async def complete(self, prompt_ids: Sequence[int], sampling: Sampling) -> Completion:
        completion = await self.inner.complete(self._round_trip(prompt_ids), sampling)
        ids = self._round_trip(completion.token_ids)
        logprobs = [*completion.logprobs[: len(ids)], *[0.0] * (len(ids) - len(completion.logprobs))]
        return replace(completion, token_ids=ids, logprobs=logprobs)


@dataclass
class TitoReport:
    trajectories: int = 0
    sampled_turns: int = 0
    multi_call_rollouts: int = 0
    """Rollouts with at least two tool calls (the multi-turn case TITO exists for)."""
    misalignments: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Count per kind: prompt, sampled, loss_mask, trainer."""
    examples: list[str] = field(default_factory=list)
    exchanges: int = 0
    drift_turns: int = 0
    """Exchanges whose sampled ids would change under decode → encode."""
    rerender_changed: list[int] = field(default_factory=list)
    """Per trajectory: its sampled tokens a chat-template re-render would drop or change."""

    @property
    def rerender_rollouts(self) -> int:
        """Rollouts a chat-template re-render would change."""
        return sum(1 for changed in self.rerender_changed if changed)

    @property
    def total_misalignments(self) -> int:
        return sum(self.misalignments.values())

    @property
    def drift_rate(self) -> float:
        return self.drift_turns / self.exchanges if self.exchanges else 0.0

    def flag(self, kind: str, where: str) -> None:
        self.misalignments[kind] += 1
        if len(self.examples) < MAX_LISTED:
            self.examples.append(f"{kind}: {where}")


def _check_trajectory(t: Trajectory, by_prompt: dict[tuple[int, ...], list[Completion]], report: TitoReport) -> None:
    where = f"{t.group_id}#{t.sample_index}"
    previous: tuple[int, ...] | None = None
    masked = [0] * len(t.tokens)
    for span in t.turns:
        prompt = tuple(t.tokens[: span.start])
        sampled = t.tokens[span.start : span.end]
        logprobs = t.logprobs[span.start : span.end]
        answers = by_prompt.get(prompt, [])
        if not answers:
            report.flag("prompt", f"{where} turn {span.turn}: no request had this turn's prompt")
        elif not any(c.token_ids == sampled and c.logprobs == logprobs for c in answers):
            report.flag("sampled", f"{where} turn {span.turn}: the span is not what the engine returned")
        if previous is not None and prompt[: len(previous)] != previous:
            report.flag("prompt", f"{where} turn {span.turn}: does not extend turn {span.turn - 1}'s request")
        previous = tuple(t.tokens[: span.end])
        masked[span.start : span.end] = [1] * (span.end - span.start)
    if t.loss_mask != masked:
        report.flag("loss_mask", f"{where}: loss mask is not 1 on exactly the sampled spans")


def _check_trainer_view(trajectories: Sequence[Trajectory], report: TitoReport) -> None:
    """The rows ``TrainBatch`` builds hold each trajectory's ids, mask and logprobs unchanged.

    Rewards and groups are rewritten (one group with a reward spread) only so the zero-variance filter keeps every
    row; the check is about the token tensors, which those fields do not touch.
    """
    if len(trajectories) < 2:
        return
    kept = [t.model_copy(update={"group_id": "tito", "reward": float(i % 2)}) for i, t in enumerate(trajectories)]
    batch = TrainBatch.from_trajectories(kept, AlgorithmConfig())
    for row, t in enumerate(trajectories):
        length = int(batch.lengths_B[row])
        same = (
            length == len(t.tokens)
            and batch.tokens_BT[row, :length].tolist() == t.tokens
            and batch.loss_mask_BT[row, :length].tolist() == [float(m) for m in t.loss_mask]
            and batch.rollout_logprobs_BT[row, :length].tolist() == [float(lp) for lp in _as_float32(t.logprobs)]
        )
        if not same:
            report.flag("trainer", f"{t.group_id}#{t.sample_index}: the trainer's row differs from the trajectory")


def _as_float32(values: Sequence[float]) -> list[float]:
    import torch

    return torch.tensor(values, dtype=torch.float32).tolist()


def rerendered_turn_ids(tokenizer: PreTrainedTokenizerBase, sampled_text: str, harness: HarnessConfig) -> list[int]:
    """One sampled assistant turn as a chat-completions client would hand it back and the template would render it:
    ``tool_calls`` parsed out in the harness's dialect, the text outside them as content, the reasoning in front of
    it only when the family keeps it in history; ids from after the generation prompt to the turn's end."""
    visible = strip_think(sampled_text)
    calls, errors, rest = TOOL_FORMATS[harness.tool_format].parse_calls(visible, None)
    parsed = bool(calls) and not errors
    message: dict[str, Any] = {"role": "assistant", "content": (rest if parsed else visible).strip()}
    thought = _THOUGHT.match(sampled_text)
    if thought is not None and harness.reasoning_in_history:  # as a reasoning parser hands it back
        message["reasoning_content"] = thought.group(1)
    if parsed:
        message["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    before = render(tokenizer, _USER, add_generation_prompt=True)
    after = render(tokenizer, [*_USER, message])
    return encode(tokenizer, after[len(before) :] if after.startswith(before) else after)


def unmatched(tokens: Sequence[int], other: Sequence[int]) -> int:
    """Tokens of ``tokens`` that are not in a matching block of ``other`` (dropped or changed)."""
    blocks = SequenceMatcher(None, list(tokens), list(other), autojunk=False).get_matching_blocks()
    return len(tokens) - sum(block.size for block in blocks)


def rerender_changes(t: Trajectory, tokenizer: PreTrainedTokenizerBase, harness: HarnessConfig) -> int:
    """The sampled tokens of ``t`` a chat-template re-render would drop or change (module docstring)."""
    changed = 0
    for span in t.turns:
        sampled = t.tokens[span.start : span.end]
        text = tokenizer.decode(sampled, skip_special_tokens=True)
        changed += unmatched(sampled, rerendered_turn_ids(tokenizer, text, harness))
    return changed


def check_tito(
    trajectories: Sequence[Trajectory],
    exchanges: Sequence[Exchange],
    tokenizer: PreTrainedTokenizerBase,
    harness: HarnessConfig | None = None,
) -> TitoReport:
    """Hold every trajectory against the engine's records and the trainer's batch; see the module docstring.
    ``harness``: the rollouts' harness, for the re-render figure (none: not measured)."""
    by_prompt: dict[tuple[int, ...], list[Completion]] = defaultdict(list)
    for exchange in exchanges:
        by_prompt[exchange.prompt_ids].append(exchange.completion)
    report = TitoReport(trajectories=len(trajectories))
    for t in trajectories:
        report.sampled_turns += len(t.turns)
        report.multi_call_rollouts += len(t.tool_calls) >= 2
        _check_trajectory(t, by_prompt, report)
    _check_trainer_view(trajectories, report)
    report.exchanges = len(exchanges)
    report.drift_turns = sum(
        encode(tokenizer, tokenizer.decode(e.completion.token_ids)) != e.completion.token_ids for e in exchanges
    )
    if harness is not None:
        report.rerender_changed = [rerender_changes(t, tokenizer, harness) for t in trajectories]
    return report
