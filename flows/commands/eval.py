"""``recipe eval``: run an agent eval, the MCQ regression suite, or render a report.

recipe eval run --harness mcp|code_only|terminal --tasks SOURCE --engine-url URL --model NAME
                [--tokenizer DIR_OR_ID] [--policy DIR] [--passes 3] [--split heldout] [--worlds DIR] [--limit N]
                [--out runs/evals/<name>] [--concurrency 8] [--temperature T] [--max-turns N]
                [--max-tokens-per-turn N] [--context-budget N] [--seed N] [--infra-retries 2]
                [--mcp-backend gateway|in_process]
    SOURCE: a data folder (tasks/<split>.jsonl + worlds/), a TaskSpec .jsonl (worlds from --worlds), an APEX
    file (apex:PATH), a folder of Harbor task folders (harbor:DIR) or ``bundled-terminal``. NAME is the model name
    the engine serves (`recipe engine serve` prints it: the policy folder by default). The harness settings are the
    policy's harness.json (from --policy, else the --tokenizer folder, else NAME when it is a folder) with the
    harness flags on top; the MCP harness serves only the policy's apps. Checks before any trial that the engine
    serves NAME, that the context budget fits its max_model_len and that the first prompt fits the budget. Writes
    spec.json, trials.jsonl, trajectories.jsonl and eval.json under --out (default runs/evals/<model>-<harness>);
    rerunning the same command resumes, running only the unfinished trials. Prints Pass@1 and mean reward, mean ± SE
    over passes. Exit codes: 0 done; 1 every trial failed for infra or task reasons (error classes and the first
    error printed); 2 a configuration error (one line on stderr), e.g. a model name the engine does not serve or a
    request the engine rejects (the eval stops at once rather than retrying it).

recipe eval mcq --engine-url URL --model NAME [--file F] [--passes 3] [--temperature 0.0] [--api chat|completions]
                [--out DIR]
    Multiple-choice accuracy (mean ± SE over passes) on --file (default: the bundled synthetic set); with --out,
    writes mcq.json there.

recipe eval report DIR [DIR ...] [--baseline DIR] [--out DIR] [--title TEXT]
    report.md + PNG plots from finished eval folders (their eval.json + trials.jsonl), compared with --baseline
    when given; written to --out (default: DIR/report).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console

console = Console()

# SOURCE prefixes for task files whose format the extension does not tell.
_PREFIXED_SOURCES = ("apex", "harbor", "jsonl", "data")


def _task_source(text: str, split: str, worlds: str | None, limit: int | None):
    from evals.sources import SourceKind, TaskSource

    if text == SourceKind.BUNDLED_TERMINAL.value:
        return TaskSource(kind=SourceKind.BUNDLED_TERMINAL, limit=limit)
    prefix, _, rest = text.partition(":")
    if prefix in _PREFIXED_SOURCES and rest:
        kind, path = SourceKind(prefix), Path(rest)
    else:
        path = Path(text)
        kind = SourceKind.DATA if path.is_dir() else SourceKind.JSONL
    return TaskSource(kind=kind, path=path, split=split, worlds=Path(worlds) if worlds else None, limit=limit)


def _eval_run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from evals.report import fmt_estimate
    from evals.runner import run_eval
    from evals.spec import EngineSpec, EvalSpec, HarnessOverrides

    spec = EvalSpec(
        tasks=_task_source(args.tasks, args.split, args.worlds, args.limit),
        harness=args.harness,
        engine=EngineSpec(base_url=args.engine_url, model=args.model, tokenizer=args.tokenizer),
        policy=Path(args.policy) if args.policy else None,
        passes=args.passes,
        out_dir=Path(args.out or f"runs/evals/{Path(args.model).name}-{args.harness}"),
        concurrency=args.concurrency,
        harness_config=HarnessOverrides(
            temperature=args.temperature,
            max_turns=args.max_turns,
            max_tokens_per_turn=args.max_tokens_per_turn,
            context_budget_tokens=args.context_budget,
            seed=args.seed,
        ),
        infra_retries=args.infra_retries,
        mcp_backend=args.mcp_backend,
    )
    if sys.stdout.isatty():
        with Progress(
            TextColumn("trials"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as bar:
            job = bar.add_task("trials", total=None)
            result = run_eval(spec, progress=lambda p: bar.update(job, completed=p.done, total=p.total))
    else:
        result = run_eval(spec)
    s = result.summary
    console.print(f"{s.n_tasks} tasks × {s.n_passes} passes → {spec.out_dir}")
    console.print(f"Pass@1 {fmt_estimate(s.pass_at_1)}   mean reward {fmt_estimate(s.mean_reward)}   (mean ± SE)")
    console.print(f"error classes: {result.counts['error_class']}")
    console.print(f"harness: {result.harness_source or 'HarnessConfig defaults (no harness.json found)'}")
    unscored = result.unscored()
    if unscored and len(unscored) == len(result.trials):
        classes = dict(Counter(t.error_class.value for t in unscored if t.error_class))
        print(
            f"recipe: every trial failed ({classes}); first error ({unscored[0].task_id}): {unscored[0].error}",
            file=sys.stderr,
        )
        return 1
    return 0


def _eval_mcq(args: argparse.Namespace) -> int:
    from envs.files import atomic_write_text
    from evals.mcq import BUNDLED_MCQ, McqApi, McqConfig, load_mcq, run_mcq
    from evals.report import fmt_estimate

    rows = load_mcq(Path(args.file) if args.file else BUNDLED_MCQ)
    result = run_mcq(rows, McqConfig(args.engine_url, args.model, args.passes, args.temperature, api=McqApi(args.api)))
    console.print(
        f"MCQ accuracy {fmt_estimate(result.accuracy)} over {result.passes} passes of {result.n_questions} questions "
        f"(no answer extracted: {result.no_answer_rate:.1%})"
    )
    if args.out:
        atomic_write_text(Path(args.out) / "mcq.json", result.model_dump_json(indent=2))
    return 0


def _eval_report(args: argparse.Namespace) -> int:
    from evals.report import write_report
    from evals.run_folder import load_eval

    runs = [load_eval(Path(folder)) for folder in args.dirs]
    baseline = load_eval(Path(args.baseline)) if args.baseline else None
    out = Path(args.out) if args.out else Path(args.dirs[0]) / "report"
    files = write_report(runs, out, args.title, baseline=baseline)
    console.print(f"wrote {files.markdown} and {len(files.plots)} plots")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    evals = commands.add_parser("eval", help="agent evals, the MCQ regression suite, reports").add_subparsers(
        dest="eval_command", required=True
    )
    run = evals.add_parser("run", help="k passes of a task set through one harness (resumable)")
    run.add_argument("--harness", choices=["mcp", "code_only", "terminal"], default="mcp")
    run.add_argument(
        "--tasks", required=True, help="data folder, tasks .jsonl, apex:FILE, harbor:DIR, bundled-terminal"
    )
    run.add_argument("--engine-url", required=True)
    run.add_argument("--model", required=True)
    run.add_argument("--tokenizer", help="tokenizer folder or hub id (default: --model)")
    run.add_argument(
        "--policy", help="policy folder whose harness.json sets the harness (default: --tokenizer, else --model)"
    )
    run.add_argument("--passes", type=int, default=3)
    run.add_argument("--split", choices=["train", "heldout"], default="heldout")
    run.add_argument("--worlds", help="worlds folder for .jsonl / apex task files")
    run.add_argument("--limit", type=int, help="only the first N tasks")
    run.add_argument("--out", help="output folder (default runs/evals/<model>-<harness>)")
    run.add_argument("--concurrency", type=int, default=8)
    run.add_argument("--temperature", type=float, help="sampling temperature (default: the policy's, else 1.0)")
    run.add_argument("--max-turns", type=int)
    run.add_argument("--max-tokens-per-turn", type=int)
    run.add_argument("--context-budget", type=int, help="context budget in tokens (prompt + all turns)")
    run.add_argument("--seed", type=int, help="sampling seed (pass p uses seed + p)")
    run.add_argument("--infra-retries", type=int, default=2)
    run.add_argument("--mcp-backend", choices=["gateway", "in_process"], default="gateway")
    run.set_defaults(handler=_eval_run)

    mcq = evals.add_parser("mcq", help="multiple-choice regression accuracy")
    mcq.add_argument("--engine-url", required=True)
    mcq.add_argument("--model", required=True)
    mcq.add_argument("--file", help="GPQA/HLE-style JSONL (default: the bundled synthetic set)")
    mcq.add_argument("--passes", type=int, default=3)
    mcq.add_argument("--temperature", type=float, default=0.0)
    mcq.add_argument("--api", choices=["chat", "completions"], default="chat")
    mcq.add_argument("--out", help="folder for mcq.json")
    mcq.set_defaults(handler=_eval_mcq)

    report = evals.add_parser("report", help="report.md + plots from finished eval folders")
    report.add_argument("dirs", nargs="+", metavar="DIR")
    report.add_argument("--baseline", help="eval folder to compare against")
    report.add_argument("--out", help="report folder (default: DIR/report)")
    report.add_argument("--title", default="Eval report")
    report.set_defaults(handler=_eval_report)
