"""A small, realistic run for the explorer's tests and screenshots, written through the real run store and catalog.

``build_sample_run`` writes ``runs_root/<run_id>/``: ``run.json``; manifests for de-risk (passed, with a finding),
tito, overfit, ablations (an arm table with CIs), hero and transfer (gate failed); a policy folder holding a tiny
tokenizer trained here (``trainer.tokenizer``, the project's Qwen-style chat markup); and ``catalog.duckdb`` with
36 rollouts added by ``Catalog.add_trajectories`` — token-exact chats whose tool calls succeed, fail
(``ModuleNotFoundError``), return nothing, or time out, one observation carrying the context nudge, one error
text that is hostile HTML, and base rollouts that call a tool the model invented (``INVENTED_TOOL``) — plus oracle
runs, probes, train steps (overfit, three ablation arms, hero), evals and gate rows.

    store = build_sample_run(tmp_path / "runs")       # then: recipe view sample --runs-root tmp_path/runs
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from envs.harness.agent import context_nudge_text
from envs.types import (
    AnswerNumeric,
    CriterionResult,
    Domain,
    ErrorClass,
    LlmJudge,
    Split,
    StopReason,
    TaskSpec,
    Tier,
    ToolCallRecord,
    Trajectory,
    TurnSpan,
)
from tasks.catalog import Catalog, tool_call_row
from tasks.run_store import RunStore, StageManifest, StageStatus

HOSTILE_ERROR = "<img src=x onerror=\"document.title='pwned'\"> '; DROP TABLE trajectories; --"
SYSTEM = "You are an analyst at a company. Use the tools, then give the final answer."


def _task(
    task_id: str, domain: Domain, tier: Tier, prompt: str, expected: float, criteria: str, split: Split = Split.TRAIN
) -> TaskSpec:
    """A sample task: its world is the task id's first two parts ("ib-1-revenue-q1" → "ib-1"), its rubric one
    number and one judged criterion."""
    world_id = "-".join(task_id.split("-")[:2])
    rubric = [AnswerNumeric(expected=expected), LlmJudge(criteria=criteria)]
    return TaskSpec(
        task_id=task_id, world_id=world_id, domain=domain, tier=tier, split=split, prompt=prompt, rubric=rubric
    )


TASKS = [
    _task("ib-1-revenue-q1", Domain.INVESTMENT_BANKING, Tier.TOY,
          "What was Q1 revenue in million USD? Read notes/q1.pdf.", 412.5, "cites the source file"),
    _task("ib-1-margin-model", Domain.INVESTMENT_BANKING, Tier.STANDARD,
          "Compute the gross margin from model.xlsx and put it on a slide.", 0.37, "the slide states the margin"),
    _task("mc-2-market-size", Domain.MANAGEMENT_CONSULTING, Tier.TOY,
          "Estimate the market size with the script in tools/size.py.", 1800.0, "states the assumptions"),
    _task("law-1-notice-period", Domain.CORPORATE_LAW, Tier.STANDARD,
          "What notice period does the supply contract require?", 90.0, "quotes the clause"),
    _task("ib-3-ebitda", Domain.INVESTMENT_BANKING, Tier.TOY,
          "What was EBITDA in 2024? Read notes/ebitda.pdf.", 96.0, "cites the source file", Split.HELDOUT),
    _task("law-3-governing-law", Domain.CORPORATE_LAW, Tier.TOY,
          "Which governing law does the NDA name?", 1.0, "names the jurisdiction", Split.HELDOUT),
]  # fmt: skip
INVENTED_TOOL = "sheets_read_file"
"""A tool no app has: the last base rollout of each train task tries it first (a model error, not a broken tool)."""
TOOLS_BY_TASK = {
    "ib-1-revenue-q1": [("pdf_read_pdf", {"path": "notes/q1.pdf"})],
    "ib-1-margin-model": [("sheets_read_cell", {"path": "model.xlsx", "cell": "C7"}), ("slides_add_slide", {})],
    "mc-2-market-size": [("code_exec_run_python", {"code": "import pandas as pd\nprint(pd.__version__)"})],
    "law-1-notice-period": [("filesystem_read_file", {"path": "contracts/supply.txt"})],
    "ib-3-ebitda": [("pdf_read_pdf", {"path": "notes/ebitda.pdf"})],
    "law-3-governing-law": [("filesystem_read_file", {"path": "contracts/nda.txt"})],
}


def _tool_outcome(tool: str, rng: random.Random, sample: int = 0) -> tuple[bool, str | None, str | None, bool, str]:
    """(ok, error class, error, returned empty, the text the model reads) for one call of ``tool``."""
    if tool == INVENTED_TOOL:
        text = f"unknown tool {tool!r}; did you mean 'sheets_read_cell'?"
        return False, "ToolError", text, False, text
    if tool == "code_exec_run_python" and rng.random() < 0.6:
        text = "ModuleNotFoundError: No module named 'pandas'"
        return False, "ModuleNotFoundError", text, False, text
    if tool == "slides_add_slide":
        return True, None, None, True, ""
    if tool == "filesystem_read_file" and sample == 2:
        return False, "timeout", "filesystem_read_file: no answer within the 30 s tool timeout", False, "timeout"
    if tool == "sheets_read_cell" and sample == 1:
        return False, "ToolError", HOSTILE_ERROR, False, HOSTILE_ERROR
    return True, None, None, False, f"{tool} result: revenue 412.5 million; margin 0.37; notice 90 days"


def _rollout(
    task: TaskSpec,
    tokenizer: Any,
    rng: random.Random,
    skill: float,
    version: int,
    sample: int,
    nudge: bool,
    invent: bool = False,
) -> Trajectory:
    """A token-exact chat: prompt (mask 0), each turn's sampled ids (mask 1) and the observation after it (mask 0);
    with ``invent``, its first call is of ``INVENTED_TOOL``."""

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    prompt = encode(
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{task.prompt}<|im_end|>\n<|im_start|>assistant\n"
    )
    t = Trajectory(task_id=task.task_id, group_id=f"g-{task.task_id}", sample_index=sample, prompt_len=len(prompt))
    t.tokens += prompt
    t.loss_mask += [0] * len(prompt)
    t.logprobs += [0.0] * len(prompt)
    calls = ([(INVENTED_TOOL, {"path": "model.xlsx"})] if invent else []) + TOOLS_BY_TASK[task.task_id]
    for turn, (tool, args) in enumerate(calls):
        call = json.dumps({"name": tool, "arguments": args})
        sampled = encode(f"I will call {tool}.\n<tool_call>\n{call}\n</tool_call><|im_end|>")
        start = len(t.tokens)
        t.tokens += sampled
        t.loss_mask += [1] * len(sampled)
        t.logprobs += [round(-rng.uniform(0.01, 2.0) * (1.2 - skill), 4) for _ in sampled]
        t.turns.append(TurnSpan(turn=turn, start=start, end=len(t.tokens), finish_reason="stop",
                                weight_version=version))  # fmt: skip
        ok, error_class, error, empty, text = _tool_outcome(tool, rng, sample)
        latency = round(rng.uniform(0.02, 0.4) if error_class != "timeout" else 30.0, 3)
        t.tool_calls.append(ToolCallRecord(turn=turn, tool=tool, args=args, ok=ok, error_class=error_class,
                                           error=error, returned_empty=empty, latency_s=latency))  # fmt: skip
        last = turn == len(calls) - 1
        content = text + (context_nudge_text(12) if nudge and last else "")
        observation = encode(
            f"\n<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        )
        t.tokens += observation
        t.loss_mask += [0] * len(observation)
        t.logprobs += [0.0] * len(observation)
        t.env_s += latency
    right = rng.random() < skill
    expected = task.rubric[0].expected  # type: ignore[union-attr]
    answer = f"{expected:g}" if right else f"{expected * rng.choice([0.5, 2.0, 10.0]):g}"
    cited = rng.random() < skill + 0.2
    final = encode(f"The answer is {answer}.<|im_end|>")
    start = len(t.tokens)
    t.tokens += final
    t.loss_mask += [1] * len(final)
    t.logprobs += [round(-rng.uniform(0.01, 1.5) * (1.2 - skill), 4) for _ in final]
    t.turns.append(TurnSpan(turn=len(calls), start=start, end=len(t.tokens), finish_reason="stop",
                            weight_version=version))  # fmt: skip
    t.final_answer = answer
    t.criteria = [
        CriterionResult(kind="answer_numeric", passed=right, detail=f"expected {expected:g}, got {answer}"),
        CriterionResult(kind="llm_judge", passed=cited, detail="cites the source" if cited else "no source named"),
    ]
    t.reward = (right + cited) / 2
    t.passed = right and cited
    t.weight_versions = [version]
    t.llm_s = round(rng.uniform(0.5, 3.0), 3)
    if any(c.error_class == "timeout" for c in t.tool_calls):
        t.stop_reason, t.error_class, t.error = StopReason.TIMEOUT, ErrorClass.MODEL, "agent timeout"
    return t


def _gate(stage: str, passed: bool, criteria: list[tuple], findings: list[dict] | None = None) -> dict[str, Any]:
    rows = [
        {"name": name, "measured": measured, "op": op, "threshold": threshold, "passed": ok, "detail": detail}
        for name, measured, op, threshold, ok, detail in criteria
    ]
    return {"stage": stage, "passed": passed, "criteria": rows, "findings": findings or [], "metrics": {}}


def _manifests(policy: Path) -> list[StageManifest]:
    derisk_findings = [
        {"subject": "slides_add_slide", "problem": "returns nothing on 100% of successful calls",
         "advice": "return a confirmation the model can read (what was written, where)", "rate": 1.0},
        {"subject": "code_exec_run_python", "problem": "fails on 60% of calls with known-good arguments "
         "(mostly ModuleNotFoundError)", "advice": "preinstall the missing package in the sandbox image", "rate": 0.6},
    ]  # fmt: skip
    # The columns the ablations stage writes per arm (flows/mechanisms.py): 18 of them, wide enough that a table
    # that cannot wrap overflows a 1,280-px window (the browser test's overflow check).
    mechanisms = {
        "nudges_inserted": 0,
        "dppo_masked_share": 0.0,
        "ratio_abs_dev_mean": 0.013736263736263736,
        "overlong_dropped_share": 0.0,
        "length_penalty_mean": 0.0,
        "weights_vs_token_mean": 0.0,
        "idle": None,
    }
    arms = [
        {"arm": "baseline", "mean_reward": 0.41, "se": 0.03, "pass_at_1": 0.30, "delta": 0.0, "ci_low": None,
         "ci_high": None, "verdict": "baseline", "landed": False, "error": None, "mechanisms": None, **mechanisms},
        {"arm": "dppo", "mean_reward": 0.47, "se": 0.03, "pass_at_1": 0.36, "delta": 0.06, "ci_low": 0.01,
         "ci_high": 0.11, "verdict": "better", "landed": False, "error": None, "mechanisms": "DPPO",
         **mechanisms, "dppo_masked_share": 0.0021598272138228943},
        {"arm": "dppo_prompt_mean_nudge", "mean_reward": 0.52, "se": 0.03, "pass_at_1": 0.41, "delta": 0.11,
         "ci_low": 0.05, "ci_high": 0.17, "verdict": "better", "landed": True, "error": None,
         "mechanisms": "context nudge, DPPO, aggregation", **mechanisms, "nudges_inserted": 20,
         "dppo_masked_share": 0.0012004801920768306, "weights_vs_token_mean": 0.047058823529411764},
    ]  # fmt: skip
    suites = [
        {"suite": "code_only", "base": 0.35, "trained": 0.42, "delta": 0.07, "ci_low": -0.01, "ci_high": 0.15,
         "verdict": "no_difference"},
        {"suite": "mcq", "base": 0.50, "trained": 0.38, "delta": -0.12, "ci_low": -0.2, "ci_high": -0.04,
         "verdict": "worse"},
    ]  # fmt: skip
    spec = [
        ("derisk", "1-derisk", StageStatus.PASSED,
         _gate("derisk", True, [("oracle pass rate", 1.0, ">=", 0.99, True, "6/6 tasks"),
                                ("infra error rate", 0.0, "<=", 0.02, True, ""),
                                ("tasks with reward variance", 4, ">=", 2, True, "")], derisk_findings),
         {"oracle_solved": 6, "base_infra_rate": 0.0, "tasks_with_variance": 4}, {"policy": str(policy)}),
        ("tito", "2-tito", StageStatus.PASSED,
         _gate("tito", True, [("misalignments", 0, "==", 0, True, "36 rollouts")]), {"misalignments": 0}, {}),
        ("overfit", "4-overfit", StageStatus.PASSED,
         _gate("overfit", True, [("subset reward after", 0.81, ">=", 0.7, True, "12 steps")]),
         {"reward_before": 0.22, "reward_after": 0.81}, {}),
        ("ablations", "5-ablations", StageStatus.PASSED,
         _gate("ablations", True, [("arms finished", 3, "==", 3, True, "")]),
         {"landed": "dppo_prompt_mean_nudge", "rule": "best CI above baseline", "arms": arms}, {}),
        ("hero", "6-hero", StageStatus.PASSED,
         _gate("hero", True, [("Pass@1 gain CI low", 0.04, ">", 0.0, True, "paired bootstrap, 95 %")]),
         {"base_pass_at_1": 0.30, "trained_pass_at_1": 0.45, "ci_low": 0.04, "ci_high": 0.26}, {}),
        ("transfer", "7-transfer", StageStatus.GATE_FAILED,
         _gate("transfer", False, [("code_only CI high", 0.15, ">=", -0.05, True, ""),
                                   ("mcq CI high", -0.04, ">=", -0.05, True, ""),
                                   ("mcq mean delta", -0.12, ">=", -0.1, False, "regression beyond noise")]),
         {"suites": suites}, {}),
    ]  # fmt: skip
    return [
        StageManifest(stage=stage, folder=folder, status=status, gate=gate, metrics=metrics, outputs=outputs,
                      started_at="2025-01-01T00:00:00+00:00", duration_s=12.5)
        for stage, folder, status, gate, metrics, outputs in spec
    ]  # fmt: skip


def build_sample_run(runs_root: Path, run_id: str = "sample", seed: int = 0) -> RunStore:
    """Write the sample run (see the module docstring) and return its store."""
    from trainer.tokenizer import save_tokenizer, train_tokenizer

    rng = random.Random(seed)
    store = RunStore.create(runs_root, "sample", {"profile": "sample"}, "sample-config", run_id=run_id)
    corpus = [SYSTEM, *(t.prompt for t in TASKS), HOSTILE_ERROR, context_nudge_text(12)] * 4
    tokenizer = train_tokenizer(corpus, vocab_size=600)
    policy = save_tokenizer(tokenizer, store.root / "policy")
    for manifest in _manifests(policy):
        store.write_manifest(manifest)
    catalog = Catalog(store.catalog_path)
    by_id = {t.task_id: t for t in TASKS}
    train, heldout = TASKS[:4], TASKS[4:]
    base = [_rollout(t, tokenizer, rng, 0.35, 0, s, nudge=False, invent=s == 3) for t in train for s in range(4)]
    catalog.add_trajectories("derisk", "base-rollouts", "base", base, by_id)
    for step in range(1, 4):
        group = [_rollout(t, tokenizer, rng, 0.3 + 0.2 * step, step - 1, s, nudge=step == 3) for t in train[:2]
                 for s in range(2)]  # fmt: skip
        catalog.add_trajectories("overfit", "train/overfit", "overfit", group, by_id, step=step)
    for label, skill, version in (("base", 0.3, 0), ("trained", 0.95, 12)):
        evals = [_rollout(t, tokenizer, rng, skill, version, p, nudge=False) for t in heldout for p in range(2)]
        catalog.add_trajectories("hero", "eval/heldout", label, evals, by_id)
        catalog.append(
            "evals",
            [
                {"stage": "hero", "suite": "heldout", "policy": label, "task_id": e.task_id,
                 "pass_index": e.sample_index, "harness": "mcp", "domain": str(by_id[e.task_id].domain),
                 "tier": str(by_id[e.task_id].tier), "reward": e.reward, "passed": e.passed,
                 "stop_reason": str(e.stop_reason)}
                for e in evals
            ],
        )  # fmt: skip
    oracle_calls = [
        tool_call_row("derisk", source, t.task_id if source == "oracle" else None, t.world_id,
                      ToolCallRecord(turn=0, tool=tool, args=args, ok=ok, error_class=error_class, error=error,
                                     returned_empty=empty, latency_s=0.05))
        for t in train
        for source in ("oracle", "probe")
        for tool, args in TOOLS_BY_TASK[t.task_id]
        for ok, error_class, error, empty, _ in [_tool_outcome(tool, rng)]
    ]  # fmt: skip
    catalog.append("tool_calls", oracle_calls)
    catalog.append(
        "oracle",
        [{"stage": "derisk", "task_id": t.task_id, "world_id": t.world_id, "domain": str(t.domain),
          "tier": str(t.tier), "split": str(t.split), "passed": True, "score": 1.0, "seconds": 0.4} for t in TASKS],
    )  # fmt: skip
    steps = []
    runs = [("overfit", "overfit", 0.22), ("ablations", "baseline", 0.25), ("ablations", "dppo", 0.28),
            ("ablations", "dppo_prompt_mean_nudge", 0.3), ("hero", "hero-dppo_prompt_mean_nudge", 0.3)]  # fmt: skip
    for stage, run, start in runs:
        for step in range(1, 13):
            reward = min(0.95, start + 0.05 * step + rng.uniform(-0.04, 0.04))
            evaluated = stage != "overfit" and step % 4 == 0
            steps.append(
                {"stage": stage, "run": run, "step": step, "wall_s": 2.0 * step, "reward_mean": reward,
                 "pass_rate": max(0.0, reward - 0.1), "trajectories": 16, "trained": True, "loss": 0.5 / step,
                 "eval_reward": reward - 0.05 if evaluated else None,
                 "eval_pass_rate": reward - 0.15 if evaluated else None}
            )  # fmt: skip
    catalog.append("train_steps", steps)
    catalog.append(
        "gates",
        [
            {"stage": m.stage, "criterion": c["name"], "measured": c["measured"], "op": c["op"],
             "threshold": c["threshold"], "passed": c["passed"], "detail": c["detail"]}
            for m in store.manifests() for c in (m.gate or {}).get("criteria", [])
        ],
    )  # fmt: skip
    return store
