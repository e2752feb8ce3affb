"""``recipe eval``: run an agent eval, the MCQ regression suite, or render a report.

recipe eval run --harness mcp|code_only|terminal --tasks SOURCE --engine-url URL --model NAME
                [--tokenizer DIR_OR_ID] [--policy DIR] [--passes 3] [--split heldout] [--worlds DIR] [--limit N]
                [--out runs/evals/<name>] [--concurrency 8] [--temperature T] [--max-turns N]
                [--max-tokens-per-turn N] [--context-budget N] [--seed N] [--infra-retries 2]
                [--mcp-backend gateway|in_process] [--judge-url URL --judge-model NAME [--judge-key-env VAR]]
    SOURCE: a data folder (tasks/<split>.jsonl + worlds/), a TaskSpec .jsonl (worlds from --worlds), an APEX-Agents
    release folder (apex:DIR; its worlds are unzipped into --worlds, default DIR/.recipe_worlds) or rows file
    (apex:FILE, worlds from --worlds), a folder of Harbor task folders (harbor:DIR) or ``bundled-terminal``. Tasks
    with llm_judge criteria (every APEX task) need the judge: an OpenAI-compatible server, its keys from the
    environment variable --judge-key-env (default JUDGE_API_KEY when set; none for a local judge).
    NAME is the model name the engine serves (`recipe engine serve` prints it: the policy folder by default). The
    harness settings are the policy's harness.json (from --policy, else the --tokenizer folder, else NAME when it is
    a folder) with the harness flags on top; the MCP harness serves only the policy's apps. Checks before any trial
    that the engine serves NAME, that the context budget fits its max_model_len, that the first prompt fits the
    budget and that tasks needing a judge have one. Writes
    spec.json, trials.jsonl, trajectories.jsonl and eval.json under --out (default runs/evals/<model>-<harness>);
    rerunning the same command resumes, running only the unfinished trials. Prints Pass@1 and mean reward, mean ± SE
    over passes. Exit codes: 0 done; 1 every trial failed for infra or task reasons (error classes and the first
    error printed); 2 a configuration error (one line on stderr), e.g. a model name the engine does not serve or a
    request the engine rejects (the eval stops at once rather than retrying it).

recipe eval mcq --engine-url URL --model NAME [--file F] [--passes 3] [--temperature 0.0] [--api chat|completions]
                [--out DIR]
    Multiple-choice accuracy (mean ± SE over passes) on --file (default: the bundled synthetic set); with --out,
    writes mcq.json there.

recipe eval export-atif RUN [--out DIR] [--tokenizer DIR_OR_ID]
    Each finished trial of the eval folder RUN as Harbor's ATIF JSON (RUN/atif/<task>__pass<p>/agent/trajectory.json
    by default), for `harbor view`; the text is decoded with the run's tokenizer unless --tokenizer is given.

recipe eval report DIR [DIR ...] [--baseline DIR] [--out DIR] [--title TEXT]
    report.md + PNG plots from finished eval folders (their eval.json + trials.jsonl), compared with --baseline
    when given; written to --out (default: DIR/report).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console

from flows.args import non_negative_float, non_negative_int, positive_int

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


DEFAULT_JUDGE_KEY_ENV = "JUDGE_API_KEY"  # as the profile's judge section names it


def _judge(args: argparse.Namespace):
    from evals.errors import EvalConfigError
    from evals.spec import JudgeSpec

    if (args.judge_url is None) != (args.judge_model is None):
        raise EvalConfigError("--judge-url and --judge-model go together: pass both, or neither")
    if args.judge_url is None:
        return None
    key_env = args.judge_key_env or (DEFAULT_JUDGE_KEY_ENV if os.environ.get(DEFAULT_JUDGE_KEY_ENV) else None)
    return JudgeSpec(base_url=args.judge_url, model=args.judge_model, api_key_env=key_env)


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
        judge=_judge(args),
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
    from evals.errors import EvalConfigError
    from evals.mcq import BUNDLED_MCQ, McqApi, McqConfig, load_mcq, run_mcq
    from evals.preflight import served_models
    from evals.report import fmt_estimate

    rows = load_mcq(Path(args.file) if args.file else BUNDLED_MCQ)
    served = served_models(args.engine_url)  # an unreachable engine or a wrong name is one line, before any question
    if args.model not in served:
        raise EvalConfigError(f"the engine at {args.engine_url} serves {sorted(served)}, not {args.model!r}")
    result = run_mcq(rows, McqConfig(args.engine_url, args.model, args.passes, args.temperature, api=McqApi(args.api)))
    console.print(
        f"MCQ accuracy {fmt_estimate(result.accuracy)} over {result.passes} passes of {result.n_questions} questions "
        f"(no answer extracted: {result.no_answer_rate:.1%})"
    )
    if args.out:
        atomic_write_text(Path(args.out) / "mcq.json", result.model_dump_json(indent=2))
    return 0


def _eval_export_atif(args: argparse.Namespace) -> int:
    import json

    from evals.atif import export_atif
    from evals.errors import EvalConfigError
    from evals.preflight import load_tokenizer
    from evals.run_folder import SPEC_FILE, TRAJECTORIES_FILE
    from evals.spec import EngineSpec

    run = Path(args.run)
    if not (run / SPEC_FILE).is_file() or not (run / TRAJECTORIES_FILE).is_file():
        raise EvalConfigError(f"{run} is not an eval folder: it lacks {SPEC_FILE} or {TRAJECTORIES_FILE}")
    engine = json.loads((run / SPEC_FILE).read_text())["engine"]
    name = args.tokenizer or engine["tokenizer"]
    tokenizer = load_tokenizer(EngineSpec(base_url="-", model=engine["model"], tokenizer=name))
    out = Path(args.out) if args.out else run / "atif"
    written = export_atif(run, out, lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False), engine["model"])
    console.print(f"wrote {len(written)} ATIF trajectories under {out}")
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
    run.add_argument("--passes", type=positive_int, default=3)
    run.add_argument("--split", choices=["train", "heldout"], default="heldout")
    run.add_argument("--worlds", help="worlds folder for .jsonl / apex task files")
    run.add_argument("--limit", type=positive_int, help="only the first N tasks")
    run.add_argument("--out", help="output folder (default runs/evals/<model>-<harness>)")
    run.add_argument("--concurrency", type=positive_int, default=8)
    run.add_argument(
        "--temperature", type=non_negative_float, help="sampling temperature (default: the policy's, else 1.0)"
    )
    run.add_argument("--max-turns", type=positive_int)
    run.add_argument("--max-tokens-per-turn", type=positive_int)
    run.add_argument("--context-budget", type=positive_int, help="context budget in tokens (prompt + all turns)")
    run.add_argument(
        "--seed", type=non_negative_int, help="sampling seed (each task and pass draws its own seed from it)"
    )
    run.add_argument("--infra-retries", type=non_negative_int, default=2)
    run.add_argument("--mcp-backend", choices=["gateway", "in_process"], default="gateway")
    run.add_argument("--judge-url", help="OpenAI-compatible judge for llm_judge criteria, e.g. http://host:8000/v1")
    run.add_argument("--judge-model", help="the judge's model name")
    run.add_argument(
        "--judge-key-env", help=f"environment variable with the judge's key(s) (default {DEFAULT_JUDGE_KEY_ENV} if set)"
    )
    run.set_defaults(handler=_eval_run)

    atif = evals.add_parser("export-atif", help="an eval's trajectories as Harbor ATIF JSON (for harbor view)")
    atif.add_argument("run", metavar="RUN", help="a finished (or partly finished) eval folder")
    atif.add_argument("--out", help="output folder (default RUN/atif)")
    atif.add_argument("--tokenizer", help="tokenizer folder or hub id (default: the run's)")
    atif.set_defaults(handler=_eval_export_atif)

    mcq = evals.add_parser("mcq", help="multiple-choice regression accuracy")
    mcq.add_argument("--engine-url", required=True)
    mcq.add_argument("--model", required=True)
    mcq.add_argument("--file", help="GPQA/HLE-style JSONL (default: the bundled synthetic set)")
    mcq.add_argument("--passes", type=positive_int, default=3)
    mcq.add_argument("--temperature", type=non_negative_float, default=0.0)
    mcq.add_argument("--api", choices=["chat", "completions"], default="chat")
    mcq.add_argument("--out", help="folder for mcq.json")
    mcq.set_defaults(handler=_eval_mcq)

    report = evals.add_parser("report", help="report.md + plots from finished eval folders")
    report.add_argument("dirs", nargs="+", metavar="DIR")
    report.add_argument("--baseline", help="eval folder to compare against")
    report.add_argument("--out", help="report folder (default: DIR/report)")
    report.add_argument("--title", default="Eval report")
    report.set_defaults(handler=_eval_report)
