"""``recipe model``: build the local profile's base model.

recipe model bootstrap [--data data] [--out models/base] [--seed 0] [--steps N]
    builds the environment in data/ if it is missing (an explicit --data must be an existing folder), trains the
    tokenizer and the tiny Qwen3 base on (noisy) oracle trajectories, evaluates Pass@1 per tier × split with real
    rollouts, and writes the policy folder and bootstrap.json to <out>/<hash>/ (a second run with the same inputs
    returns the cached model at once).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cli.args import non_negative_int, positive_int
from envs.errors import RecipeError

console = Console()
DEFAULT_DATA = "data"


class ModelCommandError(RecipeError, ValueError):
    """A flag of ``recipe model`` that names nothing usable."""


def _model_bootstrap(args: argparse.Namespace) -> int:
    from envs.build import build_environment, load_manifest
    from trainer.bootstrap import BootstrapSpec, bootstrap

    data = Path(args.data or DEFAULT_DATA)
    if args.data is not None and not data.is_dir():
        raise ModelCommandError(
            f"no environment in {data} (no such folder): make one with recipe envs generate --out {data}, or leave "
            f"--data out to use (and build) {DEFAULT_DATA}/"
        )
    if load_manifest(data) is None:
        build_environment(data)
    overrides = {"seed": args.seed} | ({"steps": args.steps} if args.steps is not None else {})
    result = bootstrap(BootstrapSpec(**overrides), data, Path(args.out), progress=console.print)
    report = result.report
    console.print(
        f"base model {'(cached) ' if result.cached else ''}at {result.path}: {report.steps_done} steps, "
        f"final loss {report.final_loss:.4f}, timings {report.timings}"
    )
    if report.eval:
        table = Table(title=f"base Pass@1 ({report.spec.eval_samples} samples per task at T=1, and greedy)")
        for column in ("tier", "split", "tasks", "pass@1", "greedy", "right tool", "right call", "copy"):
            table.add_column(column)
        for row in report.eval:
            copy = "-" if row.copy_accuracy is None else f"{row.copy_accuracy:.2f}"
            table.add_row(
                row.tier, row.split, str(row.tasks), f"{row.pass_at_1:.3f}", f"{row.greedy_pass_at_1:.3f}",
                f"{row.right_tool_rate:.2f}", f"{row.right_call_rate:.2f}", copy,
            )  # fmt: skip
        console.print(table)
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    model = commands.add_parser("model", help="the local base model").add_subparsers(
        dest="model_command", required=True, help="what to do with the base model"
    )
    boot = model.add_parser("bootstrap", help="train the tiny base model on oracle trajectories")
    boot.add_argument("--data", default=None, help=f"an environment folder (default: {DEFAULT_DATA}, built if missing)")
    boot.add_argument("--out", default="models/base", help="cache folder of base models (default: models/base)")
    boot.add_argument("--seed", type=non_negative_int, default=0, help="seed of the traces, the weights and the eval")
    boot.add_argument("--steps", type=positive_int, default=None, help="training steps (default: the spec's)")
    boot.set_defaults(handler=_model_bootstrap)
