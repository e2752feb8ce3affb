"""The retention set of a bootstrapped base: its own imitation examples of the formats RL does not train on, for the
PPO-ptx term (``trainer.local.retention``).

RL on the toy app-tool tasks wears away what the base was taught but never practises there: the code-only harness
(bash over the app CLI), the bundled terminal tasks' scripts and the multiple-choice answers (README "Gates that
fail": a healthy hero lost code-only 0.551 → 0.219 and terminal 1.000 → 0.364). InstructGPT keeps such skills by
mixing the pretraining objective into PPO; the tiny base's "pretraining" is its bootstrap, so the set is drawn again
from the base's ``bootstrap.json`` spec over the same environment — the same traces, rendered with the base's own
tokenizer, so every example is one the base trained on (``tests/trainer/test_retention.py`` checks this).

Sources (``RetentionSource``): ``app_tools`` (the MCP-harness traces RL itself trains on, off by default),
``code_only``, ``terminal`` and ``mcq``. Each contributes all its distinct examples (or a seeded sample of
``per_source``); each step's draw deals over the sources in turn (``trainer.local.retention.step_sample``), so one
plentiful format does not crowd out the others.

Like the base's bootstrap, the terminal and MCQ examples are the transfer suites' own items — the base's skill there
was taught on them — so the transfer stage then asks whether the hero kept what the base had, with the ptx term
holding it (not whether it generalises to unseen shell tasks).

    counts = write_retention_file(base_dir, Path("data"), out / "retention.jsonl", RETENTION_DEFAULT_SOURCES)
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from envs.build import load_tasks
from envs.errors import RecipeError
from envs.files import atomic_write_text
from evals.spec import HarnessKind
from trainer import terminal_examples
from trainer.bootstrap import (
    REPORT_FILE,
    BootstrapReport,
    ImitationSet,
    draw_imitation_set,
    policy_harness,
    select_tasks,
)
from trainer.mcq_examples import mcq_examples
from trainer.specs import BootstrapSpec, RetentionSource
from trainer.traces import TokenizedTrace, render_trace


class NoRetentionSet(RecipeError, ValueError):
    """The policy has no bootstrap spec to draw its examples from, or was taught none of a requested source."""


def base_spec(policy: Path) -> BootstrapSpec:
    """The spec ``policy`` was bootstrapped from (its ``bootstrap.json``)."""
    report = policy / REPORT_FILE
    if not report.is_file():
        raise NoRetentionSet(
            f"{policy} has no {REPORT_FILE}: retention replays a bootstrapped base's own examples, and this policy "
            "was not built by `recipe model bootstrap` (set the hero's retention.coef to 0)"
        )
    return BootstrapReport.model_validate_json(report.read_text()).spec


def retention_examples(
    policy: Path, data: Path, sources: Sequence[RetentionSource], per_source: int | None = None, seed: int = 0
) -> dict[RetentionSource, list[TokenizedTrace]]:
    """Each source's distinct examples of the base at ``policy`` (bootstrapped over the environment ``data``), all of
    them or at most ``per_source`` each (seeded by ``seed`` and the source), rendered with the base's tokenizer."""
    spec = base_spec(policy)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    imitation = draw_imitation_set(select_tasks(load_tasks(data), spec), data / "worlds", spec)
    found: dict[RetentionSource, list[TokenizedTrace]] = {}
    for source in sources:
        examples = _distinct(EXAMPLE_SOURCES[source](imitation, tokenizer, spec))
        if not examples:
            raise NoRetentionSet(f"the base at {policy} was taught no {source.value} examples (its bootstrap spec)")
        if per_source is not None and len(examples) > per_source:
            examples = random.Random(f"{seed}:{source.value}").sample(examples, per_source)
        found[source] = examples
    return found


def _rendered_traces(
    harness: HarnessKind, imitation: ImitationSet, tokenizer: PreTrainedTokenizerBase, spec: BootstrapSpec
) -> list[TokenizedTrace]:
    """The drawn traces of ``harness`` (a repeated trace once), rendered as the bootstrap rendered them."""
    traces = {id(trace): trace for trace in imitation.traces if trace.harness is harness}.values()
    tools = imitation.tool_specs[harness]
    return [render_trace(tokenizer, imitation.tasks_by_id[t.task_id], t, tools, imitation.config) for t in traces]


def _terminal(imitation: ImitationSet, tokenizer: PreTrainedTokenizerBase, spec: BootstrapSpec) -> list[TokenizedTrace]:
    """Each taught terminal task once, recorded in its sandbox with the base's terminal turn limit."""
    config = policy_harness(spec).for_terminal().harness
    return terminal_examples.terminal_examples(tokenizer, imitation.terminal_tasks, config, per_task=1)


def _mcq(imitation: ImitationSet, tokenizer: PreTrainedTokenizerBase, spec: BootstrapSpec) -> list[TokenizedTrace]:
    """Each taught multiple-choice question once."""
    return mcq_examples(tokenizer, imitation.mcq_rows, per_question=1, config=imitation.config)


ExampleSource = Callable[[ImitationSet, PreTrainedTokenizerBase, BootstrapSpec], list[TokenizedTrace]]
EXAMPLE_SOURCES: dict[RetentionSource, ExampleSource] = {
    RetentionSource.APP_TOOLS: partial(_rendered_traces, HarnessKind.MCP),
    RetentionSource.CODE_ONLY: partial(_rendered_traces, HarnessKind.CODE_ONLY),
    RetentionSource.TERMINAL: _terminal,
    RetentionSource.MCQ: _mcq,
}
"""How each source's examples are made again from the base's imitation set."""


def _distinct(examples: Sequence[TokenizedTrace]) -> list[TokenizedTrace]:
    """``examples`` without repeats, in order (a clean trace is drawn many times with the same tokens)."""
    seen: dict[tuple[int, ...], TokenizedTrace] = {}
    for example in examples:
        seen.setdefault(tuple(example.tokens), example)
    return list(seen.values())


def write_retention_file(
    policy: Path,
    data: Path,
    out: Path,
    sources: Sequence[RetentionSource],
    per_source: int | None = None,
    seed: int = 0,
) -> dict[str, int]:
    """``retention_examples`` as the JSON-lines file ``trainer.local.retention`` reads, written atomically; returns
    the examples per source."""
    found = retention_examples(policy, data, sources, per_source, seed)
    lines = [
        json.dumps({"source": source.value, "tokens": example.tokens, "loss_mask": example.loss_mask})
        for source, examples in found.items()
        for example in examples
    ]
    atomic_write_text(out, "\n".join(lines) + "\n")
    return {source.value: len(examples) for source, examples in found.items()}
