"""``recipe eval``: run an agent eval, the MCQ regression suite, or render a report.

recipe eval run (--tasks SOURCE | --run RUN --stage STAGE) --engine-url URL --model NAME [options]
    k passes of a task set through one harness against an engine already serving NAME (`recipe engine serve` prints
    it: the policy folder by default).

    --tasks SOURCE: a data folder (tasks/<split>.jsonl + worlds/), a TaskSpec .jsonl (worlds from --worlds), an
    APEX-Agents release folder (apex:DIR; its worlds are unzipped into --worlds, default DIR/.recipe_worlds) or rows
    file (apex:FILE, worlds from --worlds), a folder of Harbor task folders (harbor:DIR) or ``bundled-terminal``;
    --split, --tier (repeatable) and --limit choose among its tasks; --harness, --passes, --seed and the harness flags
    set how they run. The harness settings are the policy's harness.json (from --policy, else the --tokenizer folder,
    else NAME when it is a folder) with the harness flags on top; the MCP harness serves only the policy's apps.

    --run RUN --stage overfit|ablations|hero|transfer: exactly the eval the pipeline stage ran — its task set (the
    stage folder's eval-<suite>-<label>-<key>/tasks.jsonl), harness settings, passes, seeds and MCP backend — for the
    policy NAME serves. Which of the stage's evals: the one of the served policy (--policy, else NAME as a folder),
    else --suite / --label choose. Prints the stage's own numbers next to the new ones, with the paired difference.

    Tasks with llm_judge criteria (every APEX task) need the judge: an OpenAI-compatible server, its keys from the
    environment variable --judge-key-env (default JUDGE_API_KEY when set; none for a local judge). Checks before any
    trial that the engine serves NAME, that the context budget fits its max_model_len, that the first prompt fits the
    budget and that tasks needing a judge have one. Writes spec.json, trials.jsonl, trajectories.jsonl and eval.json
    under --out (default ./runs/evals/<name>-<key>, <key> a digest of what the eval runs; printed first): rerunning
    the same command resumes, running only the unfinished trials. Prints the tasks (tiers and count), Pass@1 and mean
    reward, mean ± SE over passes. Exit codes: 0 done; 1 every trial failed for infra or task reasons (error classes
    and the first error printed); 2 a configuration error (one line on stderr), e.g. a model name the engine does not
    serve or a request the engine rejects (the eval stops at once rather than retrying it).

recipe eval mcq --engine-url URL --model NAME [--file F] [--passes 3] [--temperature 0.0] [--api chat|completions]
                [--seed 0] [--out DIR]
    Multiple-choice accuracy (mean ± SE over passes) on --file (default: the bundled synthetic set); writes mcq.json
    (accuracy per pass, every answer) to --out (default ./runs/evals/mcq-<model>-<time>) and prints one line.

recipe eval export-atif EVAL_DIR [--out DIR] [--tokenizer DIR_OR_ID]
    Each finished trial of the eval folder EVAL_DIR (written by `recipe eval run`, or a stage's eval-* folder) as
    Harbor's ATIF JSON (EVAL_DIR/atif/<task>__pass<p>/agent/trajectory.json by default), for `harbor view`; the text
    is decoded with the eval's tokenizer unless --tokenizer is given.

recipe eval report DIR [DIR ...] [--baseline DIR] [--out DIR] [--title TEXT]
    report.md + PNG plots from finished eval folders (their eval.json + trials.jsonl), compared with --baseline
    when given; written to --out (default: DIR/report).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from cli.args import non_negative_float, non_negative_int, positive_int

if TYPE_CHECKING:
    from evals.records import EvalResult
    from evals.run_folder import RecordedEval
    from evals.spec import EvalSpec
    from tasks.run_store import RunStore

console = Console()

# SOURCE prefixes for task files whose format the extension does not tell.
_PREFIXED_SOURCES = ("apex", "harbor", "jsonl", "data")
TIERS = ("toy", "standard", "deliverable")  # envs.types.Tier, spelled out: importing it would slow `recipe --help`
EVAL_STAGES = ("overfit", "ablations", "hero", "transfer")  # the stages that run evals through evals.runner
DEFAULT_RUNS_ROOT = "runs"
DEFAULT_JUDGE_KEY_ENV = "JUDGE_API_KEY"  # as the profile's judge section names it
SPEC_FLAGS = (
    "harness",
    "passes",
    "split",
    "tier",
    "limit",
    "temperature",
    "max_turns",
    "max_tokens_per_turn",
    "context_budget",
    "seed",
    "infra_retries",
    "mcp_backend",
)
"""Flags (by argparse dest) that choose the tasks or how they run: a stage's eval fixes them, so --run refuses them."""
RUN_FLAGS = ("stage", "suite", "label", "runs_root")
"""Flags that pick a pipeline stage's eval: they mean nothing without --run."""


def _say(text: str) -> None:
    """One line of the command's summary, never wrapped at the terminal's width nor read as rich markup."""
    console.print(text, soft_wrap=True, markup=False, highlight=False)


def _refuse(args: argparse.Namespace, dests: Sequence[str], why: str) -> None:
    """A configuration error saying ``why``, then naming the given flags among ``dests`` (unset flags are None)."""
    given = [f"--{dest.replace('_', '-')}" for dest in dests if getattr(args, dest) is not None]
    if given:
        from evals.errors import EvalConfigError

        raise EvalConfigError(f"{why}: {', '.join(given)}")


def _given(**fields: object) -> dict[str, object]:
    """The fields a flag set, so the spec's own defaults apply to the others."""
    return {name: value for name, value in fields.items() if value is not None}


def _task_source(args: argparse.Namespace):
    from envs.types import Tier
    from evals.sources import SourceKind, TaskSource

    choice = _given(limit=args.limit, split=args.split) | {"tiers": tuple(Tier(t) for t in args.tier or ())}
    if args.tasks == SourceKind.BUNDLED_TERMINAL.value:
        return TaskSource(kind=SourceKind.BUNDLED_TERMINAL, **choice)
    prefix, _, rest = args.tasks.partition(":")
    if prefix in _PREFIXED_SOURCES and rest:
        kind, path = SourceKind(prefix), Path(rest)
    else:
        path = Path(args.tasks)
        kind = SourceKind.DATA if path.is_dir() else SourceKind.JSONL
    return TaskSource(kind=kind, path=path, worlds=Path(args.worlds) if args.worlds else None, **choice)


def _judge(args: argparse.Namespace):
    from evals.errors import EvalConfigError
    from evals.spec import JudgeSpec

    if (args.judge_url is None) != (args.judge_model is None):
        raise EvalConfigError("--judge-url and --judge-model go together: pass both, or neither")
    if args.judge_url is None:
        if args.judge_audit:
            raise EvalConfigError("--judge-audit needs a judge: pass --judge-url and --judge-model")
        return None
    key_env = args.judge_key_env or (DEFAULT_JUDGE_KEY_ENV if os.environ.get(DEFAULT_JUDGE_KEY_ENV) else None)
    return JudgeSpec(
        base_url=args.judge_url, model=args.judge_model, api_key_env=key_env, audit_samples=args.judge_audit
    )


def _flags_spec(args: argparse.Namespace) -> tuple[EvalSpec, str]:
    """The eval the flags describe (``--tasks``), and the name its default folder starts with."""
    from evals.spec import EngineSpec, EvalSpec, HarnessOverrides

    _refuse(args, RUN_FLAGS, "these flags pick a pipeline stage's eval and go only with --run RUN, not --tasks")
    spec = EvalSpec(
        tasks=_task_source(args),
        engine=EngineSpec(base_url=args.engine_url, model=args.model, tokenizer=args.tokenizer),
        policy=Path(args.policy) if args.policy else None,
        out_dir=Path(args.out or "."),  # the default folder is keyed by the spec: set below, once it exists
        concurrency=args.concurrency,
        harness_config=HarnessOverrides(
            temperature=args.temperature,
            max_turns=args.max_turns,
            max_tokens_per_turn=args.max_tokens_per_turn,
            context_budget_tokens=args.context_budget,
            seed=args.seed,
        ),
        judge=_judge(args),
        **_given(
            harness=args.harness, passes=args.passes, infra_retries=args.infra_retries, mcp_backend=args.mcp_backend
        ),
    )
    return spec, f"{Path(args.model).name}-{spec.harness.value}"


# --- a pipeline stage's eval (--run RUN --stage STAGE) ----------------------------------------------------------------


@dataclass(frozen=True)
class StageEval:
    """One eval a stage ran: its work folder ``eval-<suite>-<label>-<key>`` (``tasks.run_store.eval_folder_stem``)."""

    suite: str
    label: str
    record: RecordedEval

    @property
    def name(self) -> str:
        return f"{self.suite}/{self.label}"

    def evaluated(self, policy: Path) -> bool:
        """Whether this eval's policy is the folder ``policy`` (where the record's path is now, for a moved run)."""
        from evals.errors import EvalConfigError
        from evals.run_folder import found_here

        try:
            now = found_here(self.record.policy, "policy", "--policy", run_root=self.record.folder.parents[1])
        except EvalConfigError:
            return False
        return now is not None and Path(now).resolve() == policy.resolve()


def _newest(folder: Path) -> float:
    """When the folder's eval last finished (``eval.json`` is rewritten at every end), else when it started."""
    from evals.run_folder import RESULT_FILE, SPEC_FILE

    done = folder / RESULT_FILE
    return (done if done.is_file() else folder / SPEC_FILE).stat().st_mtime


def stage_evals(store: RunStore, stage: str) -> list[StageEval]:
    """The evals of ``stage`` in the run, the newest folder per suite and label: a stage run again after a config
    change leaves its older work folders behind, and the newest are those its last attempt measured."""
    from evals.errors import EvalConfigError
    from evals.run_folder import SPEC_FILE, RecordedEval
    from flows.config import StageName
    from tasks.run_store import eval_folder_parts

    stage_dir = store.root / StageName(stage).folder
    newest: dict[tuple[str, str], Path] = {}
    for folder in sorted((spec.parent for spec in stage_dir.glob(f"eval-*/{SPEC_FILE}")), key=_newest):
        if (parts := eval_folder_parts(folder.name)) is not None:
            newest[parts] = folder
    if not newest:
        raise EvalConfigError(
            f"stage {stage} of run {store.run_id} ran no eval (no {stage_dir}/eval-*/{SPEC_FILE}); run it first: "
            f"recipe stage {stage} --run {store.run_id}"
        )
    return [StageEval(suite, label, RecordedEval.read(folder)) for (suite, label), folder in sorted(newest.items())]


def choose_stage_eval(evals: Sequence[StageEval], args: argparse.Namespace) -> StageEval:
    """The stage's eval to run again: those of ``--suite`` / ``--label``; of several, the one of the served policy."""
    from evals.errors import EvalConfigError

    chosen = [e for e in evals if args.suite in (None, e.suite) and args.label in (None, e.label)]
    served = Path(args.policy) if args.policy else Path(args.model)
    if len(chosen) > 1 and served.is_dir():
        chosen = [e for e in chosen if e.evaluated(served)]
    if len(chosen) == 1:
        return chosen[0]
    listed = "; ".join(f"{e.name} (policy {e.record.policy})" for e in evals)
    raise EvalConfigError(
        f"{'none' if not chosen else 'several'} of the stage's evals match: {listed}. Choose one with --suite "
        "SUITE --label LABEL, or serve one of these policies"
    )


def _stage_spec(args: argparse.Namespace) -> tuple[EvalSpec, str, StageEval]:
    """The stage eval ``--run`` / ``--stage`` name, as a spec for the engine at ``--engine-url``; its folder name."""
    from evals.errors import EvalConfigError
    from evals.spec import EngineSpec
    from tasks.run_store import RunStore

    _refuse(args, SPEC_FLAGS, "the stage's eval fixes the tasks, harness, passes and seeds, so --run refuses")
    if args.stage is None:
        raise EvalConfigError(f"--run needs --stage, the stage whose eval to run again ({', '.join(EVAL_STAGES)})")
    store = RunStore.open(Path(args.runs_root or DEFAULT_RUNS_ROOT), args.run)
    stage_eval = choose_stage_eval(stage_evals(store, args.stage), args)
    spec = stage_eval.record.rerun(
        EngineSpec(base_url=args.engine_url, model=args.model, tokenizer=args.tokenizer),
        Path(args.out or "."),  # the default folder is keyed by the spec: set by the caller
        args.concurrency,
        judge=_judge(args),
        worlds=Path(args.worlds) if args.worlds else None,
        policy=Path(args.policy) if args.policy else None,
        run_root=store.root,
    )
    return spec, f"{store.run_id}-{args.stage}-{stage_eval.suite}-{stage_eval.label}", stage_eval


def _versus_stage(stage_eval: StageEval, result: EvalResult) -> None:
    """The stage's own numbers and the paired difference of this rerun from them (the same tasks, passes, seeds)."""
    from evals.report import ReportRun, compare_runs, fmt_estimate
    from evals.run_folder import RESULT_FILE, load_eval
    from evals.types import Metric

    folder = stage_eval.record.folder
    if not (folder / RESULT_FILE).is_file():
        _say(f"the stage's eval {folder} did not finish: nothing to compare with")
        return
    stage = load_eval(folder)
    s = stage.summary
    _say(f"the stage's eval ({folder}): Pass@1 {fmt_estimate(s.pass_at_1)}   mean reward {fmt_estimate(s.mean_reward)}")
    c = compare_runs(ReportRun.from_eval(stage), ReportRun.from_eval(result), Metric.PASS_AT_1)
    _say(
        f"this run − the stage's: Pass@1 {c.mean_diff:+.3f}, {c.confidence:.0%} CI [{c.ci_low:+.3f}, "
        f"{c.ci_high:+.3f}]: {c.verdict.value.replace('_', ' ')}"
    )


# --- the commands -----------------------------------------------------------------------------------------------------


def _run_with_progress(spec: EvalSpec) -> EvalResult:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from evals.runner import run_eval

    if not sys.stdout.isatty():
        return run_eval(spec)
    with Progress(TextColumn("trials"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        job = bar.add_task("trials", total=None)
        return run_eval(spec, progress=lambda p: bar.update(job, completed=p.done, total=p.total))


def _eval_run(args: argparse.Namespace) -> int:
    from evals.report import counted, fmt_estimate, tasks_text
    from evals.run_folder import default_out_dir

    stage_eval = None
    if args.run:
        spec, name, stage_eval = _stage_spec(args)
        _say(f"running again the eval in {stage_eval.record.folder} ({stage_eval.name} of stage {args.stage})")
    else:
        spec, name = _flags_spec(args)
    if not args.out:
        spec = spec.model_copy(update={"out_dir": default_out_dir(spec, name)})
    _say(f"eval folder: {spec.out_dir}  (the same command resumes it)")
    result = _run_with_progress(spec)
    s = result.summary
    _say(f"{tasks_text(s)} × {counted(s.n_passes, 'pass', 'passes')} → {spec.out_dir}")
    _say(f"Pass@1 {fmt_estimate(s.pass_at_1)}   mean reward {fmt_estimate(s.mean_reward)}   (mean ± SE over passes)")
    _say(f"error classes: {result.counts['error_class']}")
    _say(f"harness: {result.harness_source or 'HarnessConfig defaults (no harness.json found)'}")
    if stage_eval is not None:
        _versus_stage(stage_eval, result)
    unscored = result.unscored()
    if unscored and len(unscored) == len(result.trials):
        classes = dict(Counter(t.error_class.value for t in unscored if t.error_class))
        print(
            f"recipe: every trial failed ({classes}); first error ({unscored[0].task_id}): {unscored[0].error}",
            file=sys.stderr,
        )
        return 1
    return 0


MCQ_FILE = "mcq.json"


def _eval_mcq(args: argparse.Namespace) -> int:
    from envs.files import atomic_write_text
    from evals.errors import EvalConfigError
    from evals.mcq import BUNDLED_MCQ, McqApi, McqConfig, load_mcq, run_mcq
    from evals.preflight import served_models
    from evals.report import counted, fmt_estimate
    from evals.run_folder import EVALS_DIR

    rows = load_mcq(Path(args.file) if args.file else BUNDLED_MCQ)
    served = served_models(args.engine_url)  # an unreachable engine or a wrong name is one line, before any question
    if args.model not in served:
        raise EvalConfigError(f"the engine at {args.engine_url} serves {sorted(served)}, not {args.model!r}")
    config = McqConfig(args.engine_url, args.model, args.passes, args.temperature, McqApi(args.api), seed=args.seed)
    result = run_mcq(rows, config)
    # Nothing resumes here, so each run without --out gets a folder of its own: earlier results stay.
    out = (
        Path(args.out)
        if args.out
        else Path.cwd() / EVALS_DIR / f"mcq-{Path(args.model).name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    atomic_write_text(out / MCQ_FILE, result.model_dump_json(indent=2))
    _say(
        f"MCQ accuracy {fmt_estimate(result.accuracy)} over {counted(result.passes, 'pass', 'passes')} of "
        f"{counted(result.n_questions, 'question')} (no answer extracted: {result.no_answer_rate:.1%}) "
        f"→ {out / MCQ_FILE}"
    )
    return 0


def _eval_export_atif(args: argparse.Namespace) -> int:
    import json

    from evals.atif import export_atif
    from evals.errors import EvalConfigError
    from evals.preflight import load_tokenizer
    from evals.run_folder import SPEC_FILE, TRAJECTORIES_FILE
    from evals.spec import EngineSpec
    from tasks.run_store import RUN_FILE

    folder = Path(args.eval_dir)
    if (folder / RUN_FILE).is_file():
        examples = sorted(folder.glob(f"*/eval-*/{TRAJECTORIES_FILE}"))
        example = f", e.g. {examples[-1].parent}" if examples else ""
        raise EvalConfigError(f"{folder} is a pipeline run folder: pass one of its stages' eval folders{example}")
    if not (folder / SPEC_FILE).is_file() or not (folder / TRAJECTORIES_FILE).is_file():
        raise EvalConfigError(f"{folder} is not an eval folder: it lacks {SPEC_FILE} or {TRAJECTORIES_FILE}")
    engine = json.loads((folder / SPEC_FILE).read_text())["engine"]
    name = args.tokenizer or engine["tokenizer"]
    tokenizer = load_tokenizer(EngineSpec(base_url="-", model=engine["model"], tokenizer=name))
    out = Path(args.out) if args.out else folder / "atif"
    written = export_atif(
        folder, out, lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False), engine["model"]
    )
    _say(f"wrote {len(written)} ATIF trajectories under {out}")
    return 0


def _eval_report(args: argparse.Namespace) -> int:
    from evals.report import write_report
    from evals.run_folder import load_eval

    runs = [load_eval(Path(folder)) for folder in args.dirs]
    baseline = load_eval(Path(args.baseline)) if args.baseline else None
    out = Path(args.out) if args.out else Path(args.dirs[0]) / "report"
    files = write_report(runs, out, args.title, baseline=baseline)
    _say(f"wrote {files.markdown} and {len(files.plots)} plots")
    return 0


# --- the command line -------------------------------------------------------------------------------------------------


def _run_source_arguments(run: argparse.ArgumentParser) -> None:
    """Where the tasks come from: a task source chosen by flags, or a pipeline stage's eval."""
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--tasks",
        metavar="SOURCE",
        help="the tasks: a data folder, a tasks .jsonl, apex:DIR, apex:FILE, harbor:DIR or bundled-terminal",
    )
    source.add_argument(
        "--run", metavar="RUN", help="rerun the eval a pipeline stage ran (with --stage): a run id or run folder"
    )
    run.add_argument("--stage", choices=EVAL_STAGES, help="with --run: the stage whose task set and settings to use")
    run.add_argument(
        "--suite",
        metavar="SUITE",
        help="with --run: which of the stage's suites (heldout, subset, code_only, terminal)",
    )
    run.add_argument(
        "--label", metavar="LABEL", help="with --run: which policy's eval (base, trained, an ablation arm's name)"
    )
    run.add_argument(
        "--runs-root", metavar="DIR", help=f"with --run: the folder holding run folders (default {DEFAULT_RUNS_ROOT})"
    )
    run.add_argument(
        "--split", choices=["train", "heldout"], help="a data folder's split to evaluate (default heldout)"
    )
    run.add_argument(
        "--tier", action="append", choices=TIERS, help="only tasks of this tier; repeat for several (default: all)"
    )
    run.add_argument(
        "--limit", metavar="N", type=positive_int, help="only the first N tasks (after --split and --tier)"
    )
    run.add_argument(
        "--worlds",
        metavar="DIR",
        help="the worlds folder of .jsonl and apex task files, or of a moved run's stage eval",
    )


def _run_engine_arguments(run: argparse.ArgumentParser) -> None:
    """Which engine and policy answer."""
    run.add_argument(
        "--engine-url", metavar="URL", required=True, help="the serving engine's root URL, e.g. http://127.0.0.1:8000"
    )
    run.add_argument(
        "--model", metavar="NAME", required=True, help="the model name the engine serves (its policy folder by default)"
    )
    run.add_argument(
        "--tokenizer",
        metavar="DIR_OR_ID",
        help="tokenizer folder or hub id (default: --model; with --run, the stage's)",
    )
    run.add_argument(
        "--policy",
        metavar="DIR",
        help="policy folder whose harness.json sets the harness (default: --tokenizer, else --model; with --run, "
        "the stage's)",
    )


def _run_harness_arguments(run: argparse.ArgumentParser) -> None:
    """How the tasks run: the harness, passes, sampling and the harness.json values to override."""
    run.add_argument(
        "--harness", choices=["mcp", "code_only", "terminal"], help="the agent's tools: MCP apps (default), code, shell"
    )
    run.add_argument(
        "--passes", metavar="N", type=positive_int, help="attempts per task; Pass@1 is mean ± SE over them (default 3)"
    )
    run.add_argument(
        "--seed",
        metavar="N",
        type=non_negative_int,
        help="sampling seed; each task and pass draws its own from it (the pipeline uses its seed + 1)",
    )
    run.add_argument(
        "--temperature",
        metavar="T",
        type=non_negative_float,
        help="sampling temperature (default: the policy's, else 1.0)",
    )
    run.add_argument(
        "--max-turns", metavar="N", type=positive_int, help="most model turns per trial (default: the policy's)"
    )
    run.add_argument(
        "--max-tokens-per-turn",
        metavar="N",
        type=positive_int,
        help="most tokens the model writes per turn (default: the policy's)",
    )
    run.add_argument(
        "--context-budget",
        metavar="TOKENS",
        type=positive_int,
        help="context budget in tokens, prompt + all turns (default: the policy's)",
    )
    run.add_argument(
        "--infra-retries",
        metavar="N",
        type=non_negative_int,
        help="reruns of a trial that failed for infra reasons (default 2)",
    )
    run.add_argument(
        "--mcp-backend",
        choices=["gateway", "in_process"],
        help="MCP apps behind a stdio gateway in sandboxes (default) or in this process (the pipeline's choice)",
    )
    run.add_argument(
        "--judge-url", metavar="URL", help="OpenAI-compatible judge for llm_judge criteria, e.g. http://host:8000/v1"
    )
    run.add_argument("--judge-model", metavar="NAME", help="the judge's model name (with --judge-url)")
    run.add_argument(
        "--judge-key-env",
        metavar="VAR",
        help=f"environment variable with the judge's key(s) (default {DEFAULT_JUDGE_KEY_ENV} if set)",
    )
    run.add_argument(
        "--judge-audit",
        type=int,
        default=0,
        metavar="N",
        help="re-judge the first N graded samples and judge an empty answer for each (judge_audit.json in the out dir)",
    )


def register(commands: argparse._SubParsersAction) -> None:
    evals = commands.add_parser("eval", help="agent evals, the MCQ regression suite, reports").add_subparsers(
        dest="eval_command", required=True, help="which eval to run, or what to do with finished ones"
    )
    run = evals.add_parser("run", help="k passes of a task set through one harness (resumable)")
    _run_source_arguments(run)
    _run_engine_arguments(run)
    _run_harness_arguments(run)
    run.add_argument("--out", metavar="DIR", help="output folder (default ./runs/evals/<name>-<key>, printed first)")
    run.add_argument("--concurrency", metavar="N", type=positive_int, default=8, help="trials in flight at once")
    run.set_defaults(handler=_eval_run)

    atif = evals.add_parser("export-atif", help="an eval's trajectories as Harbor ATIF JSON (for harbor view)")
    atif.add_argument(
        "eval_dir",
        metavar="EVAL_DIR",
        help="an eval folder (from recipe eval run, or a run's <stage>/eval-* folder), finished or not",
    )
    atif.add_argument("--out", metavar="DIR", help="output folder (default EVAL_DIR/atif)")
    atif.add_argument("--tokenizer", metavar="DIR_OR_ID", help="tokenizer folder or hub id (default: the eval's)")
    atif.set_defaults(handler=_eval_export_atif)

    mcq = evals.add_parser("mcq", help="multiple-choice regression accuracy")
    mcq.add_argument(
        "--engine-url", metavar="URL", required=True, help="the serving engine's root URL, e.g. http://127.0.0.1:8000"
    )
    mcq.add_argument("--model", metavar="NAME", required=True, help="the model name the engine serves")
    mcq.add_argument("--file", metavar="FILE", help="GPQA/HLE-style JSONL (default: the bundled synthetic set)")
    mcq.add_argument(
        "--passes",
        metavar="N",
        type=positive_int,
        default=3,
        help="passes over every question; accuracy is mean ± SE over them",
    )
    mcq.add_argument("--temperature", metavar="T", type=non_negative_float, default=0.0, help="sampling temperature")
    mcq.add_argument("--api", choices=["chat", "completions"], default="chat", help="the engine route to ask")
    mcq.add_argument(
        "--seed",
        metavar="N",
        type=non_negative_int,
        default=0,
        help="sampling seed; each question and pass draws its own from it",
    )
    mcq.add_argument("--out", metavar="DIR", help="folder for mcq.json (default ./runs/evals/mcq-<model>-<time>)")
    mcq.set_defaults(handler=_eval_mcq)

    report = evals.add_parser("report", help="report.md + plots from finished eval folders")
    report.add_argument("dirs", nargs="+", metavar="DIR", help="finished eval folders, one per run to show")
    report.add_argument("--baseline", metavar="DIR", help="eval folder to compare against")
    report.add_argument("--out", metavar="DIR", help="report folder (default: the first DIR/report)")
    report.add_argument("--title", metavar="TEXT", default="Eval report", help="the report's heading")
    report.set_defaults(handler=_eval_report)
