"""``recipe train``: RL on the local profile — GRPO-family training of the bootstrapped base on the toy tier.

recipe train run [--loop sync|async] [--base DIR] [--data data] [--out runs/train/<loop>] [--tasks 16]
                 [--samples 8] [--prompts 8] [--steps 20] [--lr 1e-4] [--eval-samples 8]
                 [--workers 8] [--staleness 1] [--runtime asyncio|ray]
    picks the overfit subset (train tasks on which the base's rollouts disagree), evaluates the base on it, runs
    the synchronous loop (the overfit gate's) or the fully-async one (K workers, staleness bound, in-flight weight
    sync), evaluates the final checkpoint, and prints the curve and before/after reward. Writes checkpoints and
    history.json under --out; rerunning resumes from the latest checkpoint. Without --base it bootstraps one into
    models/base (cached).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

console = Console()


def _train_run(args: argparse.Namespace) -> int:
    import torch

    from envs.build import ensure_environment
    from trainer.bootstrap import BootstrapSpec, bootstrap
    from trainer.local import latest_checkpoint
    from trainer.local.checkpoint import POLICY_DIR
    from trainer.loops import AsyncLoopConfig, SyncLoopConfig, run_async_loop, run_sync_loop
    from trainer.loops.common import CHECKPOINTS, TaskFilter
    from trainer.loops.local_run import (
        base_loop_settings,
        evaluate_policy_dir,
        overfit_subset,
        subset_filter,
        train_candidates,
    )

    torch.set_num_threads(1)  # tiny models: one thread each for the engine and the trainer beats contention
    data = Path(args.data)
    ensure_environment(data)
    base = Path(args.base) if args.base else bootstrap(BootstrapSpec(), data, Path("models/base"), console.print).path
    worlds = data / "worlds"
    settings = base_loop_settings(
        base,
        lr=args.lr,
        prompts_per_step=args.prompts,
        samples_per_prompt=args.samples,
        steps=args.steps,
        eval_samples=args.eval_samples,
        max_num_seqs=max(args.prompts, args.workers) * args.samples,
    )
    screen = SyncLoopConfig(**settings, tasks=TaskFilter(tier=None, split=None))
    subset = overfit_subset(base, screen, worlds, train_candidates(base, data), args.tasks, args.eval_samples)
    if not subset:
        console.print("[red]no train task has reward variance under this base: nothing to learn from[/red]")
        return 1
    console.print(f"overfit subset: {len(subset)} tasks with non-zero reward variance under the base")
    settings["tasks"] = subset_filter(subset)
    if args.loop == "sync":
        config, run = SyncLoopConfig(**settings), run_sync_loop
    else:
        config = AsyncLoopConfig(**settings, workers=args.workers, max_staleness=args.staleness, runtime=args.runtime)
        run = run_async_loop
    before = evaluate_policy_dir(base, config, worlds, subset)
    console.print(f"base: reward {before[0]:.3f}  pass {before[1]:.3f}")
    out = Path(args.out or f"runs/train/{args.loop}")

    def show(record) -> None:
        console.print(
            f"step {record.step:3d}  reward {record.reward_mean:.3f}  wall {record.wall_s:6.1f}s  "
            f"gen {record.generate_s:5.1f}s  train {record.train_s:5.1f}s  dropped groups {record.groups_dropped}"
        )

    history = run(base, subset, worlds, config, out, show)
    after = evaluate_policy_dir(latest_checkpoint(out / CHECKPOINTS) / POLICY_DIR, config, worlds, subset)
    console.print(
        f"after {len(history.steps)} steps: reward {after[0]:.3f}  pass {after[1]:.3f} (base {before[0]:.3f})"
    )
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser("train", help="RL loops on the local profile").add_subparsers(
        dest="train_command", required=True
    )
    run = train.add_parser("run", help="train the base on its overfit subset with the sync or async loop")
    run.add_argument("--loop", choices=["sync", "async"], default="sync")
    run.add_argument("--base", default=None, help="bootstrapped policy folder (default: bootstrap into models/base)")
    run.add_argument("--data", default="data")
    run.add_argument("--out", default=None, help="run folder (default: runs/train/<loop>)")
    run.add_argument("--tasks", type=int, default=16, help="size of the overfit subset")
    run.add_argument("--samples", type=int, default=8, help="rollouts per group")
    run.add_argument("--prompts", type=int, default=8, help="groups per optimizer step")
    run.add_argument("--steps", type=int, default=20)
    run.add_argument("--lr", type=float, default=1e-4)
    run.add_argument("--eval-samples", type=int, default=8)
    run.add_argument("--workers", type=int, default=8, help="async: generation workers (K)")
    run.add_argument("--staleness", type=int, default=1, help="async: max staleness in optimizer steps (S)")
    run.add_argument("--runtime", choices=["asyncio", "ray"], default="asyncio", help="async: in-process or Ray actors")
    run.set_defaults(handler=_train_run)
