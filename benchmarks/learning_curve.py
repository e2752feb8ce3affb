"""Learning curve of the local profile: base eval → synchronous loop → fully-async loop, on the toy tier.

Tasks: the toy train tasks on which the base's ``--eval-samples`` screening rollouts disagree (some solved, some
not — the recipe's overfit-subset rule), the first ``--tasks`` of them.

The base is the bootstrapped tiny model (``trainer.bootstrap``; ``--base`` or ``recipe model bootstrap``); its
``bootstrap.json`` decides the apps and the harness settings, so rollouts here look exactly like the ones it was
trained to imitate. Both loops train on the same ``--tasks`` train tasks (``--samples`` rollouts per group, GRPO
without std, DPPO, prompt_mean — the hero algorithm — at Adam ``--lr``) from the same base for ``--steps`` steps.

Printed: the curve of each loop (step, train reward = mean reward of the step's rollouts, wall seconds), the eval
reward on the train subset before and after each loop (``--eval-samples`` per task), the wall time each loop needed
to bring its 5-step moving-average train reward to the target = midpoint between the base eval reward and the sync
loop's best moving average (per-step train reward is noisy: each step draws other tasks), their ratio (async /
sync) and the async trainer's idle share (Σ wait_for_generation_buffer / wall). A PNG of both curves lands in
``<out>/learning_curve.png``.

    .venv/bin/python benchmarks/learning_curve.py --base models/base/<hash> --data data --steps 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from envs.build import ensure_environment, load_tasks
from envs.harness.agent import AgentSetup
from envs.types import Split, TaskSpec
from trainer.algorithms import AlgorithmConfig
from trainer.bootstrap import BootstrapReport, BootstrapSpec, bootstrap, harness_config, select_tasks
from trainer.engine import Engine
from trainer.local import TrainerConfig, latest_checkpoint
from trainer.local.checkpoint import POLICY_DIR
from trainer.loops import (
    AsyncLoopConfig,
    LoopHistory,
    LoopHooks,
    LoopJob,
    StepRecord,
    SyncLoopConfig,
    TaskFilter,
    run_async_loop,
    run_sync_loop,
)
from trainer.loops.config import LoopConfig
from trainer.loops.engine_adapter import InProcessEngine
from trainer.loops.evaluation import evaluate_reward, tasks_with_variance
from trainer.loops.policy import CHECKPOINTS
from trainer.loops.rollouts import Rollouts, default_envs
from trainer.model import load_policy

WINDOW = 5


def evaluate_policy_dir(
    policy_dir: Path, config: LoopConfig, worlds_root: Path, tasks: Sequence[TaskSpec]
) -> tuple[float, float]:
    """(mean reward, pass rate) of a saved policy on ``tasks``, ``config.eval_samples`` sampled rollouts each."""
    model, tokenizer = load_policy(policy_dir)
    envs_for = default_envs(worlds_root, config.apps)
    with Engine(model, tokenizer, config.engine_config()) as engine:
        agent = AgentSetup(InProcessEngine(engine), tokenizer, config.harness)
        rollouts = Rollouts(envs_for, agent, seed=config.seed + 1)
        return asyncio.run(evaluate_reward(rollouts, tasks, config.eval_samples))


def overfit_subset(
    policy_dir: Path, config: LoopConfig, worlds_root: Path, tasks: Sequence[TaskSpec], size: int, n: int
) -> list[TaskSpec]:
    """The first ``size`` of ``tasks`` on which the policy's ``n`` rollouts disagree (``tasks_with_variance``)."""
    model, tokenizer = load_policy(policy_dir)
    envs_for = default_envs(worlds_root, config.apps)
    with Engine(model, tokenizer, config.engine_config()) as engine:
        agent = AgentSetup(InProcessEngine(engine), tokenizer, config.harness)
        rollouts = Rollouts(envs_for, agent, seed=config.seed + 2)
        varied = asyncio.run(tasks_with_variance(rollouts, tasks, n))
    return varied[:size]


def moving_average(values: list[float], window: int = WINDOW) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start)."""
    return [sum(values[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def overlap_bound(history: LoopHistory) -> tuple[float, float, float]:
    """The most an async loop can speed a step up by overlapping generation with training on the same cores:
    ``1 + min(g, t) / max(g, t)`` for the sync loop's mean generation ``g`` and training ``t`` seconds per step
    (perfect overlap hides the shorter phase entirely). Returns (bound, g, t)."""
    steps = [r for r in history.steps if r.trained] or history.steps
    g = sum(r.generate_s for r in steps) / len(steps)
    t = sum(r.train_s for r in steps) / len(steps)
    return (1 + min(g, t) / max(g, t) if max(g, t) > 0 else 1.0), g, t


def time_to(history: LoopHistory, target: float) -> float | None:
    """Wall seconds at the first step whose moving-average train reward reaches ``target`` (None: never)."""
    smooth = moving_average([r.reward_mean for r in history.steps])
    return next((r.wall_s for r, s in zip(history.steps, smooth, strict=True) if s >= target), None)


def print_step(name: str):
    def show(record: StepRecord) -> None:
        extra = f" wait {record.wait_s:5.1f}s stale≤{record.staleness_max}" if name == "async" else ""
        print(
            f"  {name:5s} step {record.step:3d}  reward {record.reward_mean:.3f}  pass {record.pass_rate:.3f}  "
            f"wall {record.wall_s:7.1f}s  gen {record.generate_s:5.1f}s train {record.train_s:5.1f}s "
            f"sync {record.sync_s:4.2f}s dropped {record.groups_dropped}{extra}",
            flush=True,
        )

    return show


def plot(histories: dict[str, LoopHistory], base: float, target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(11, 4))
    for name, history in histories.items():
        smooth = moving_average([r.reward_mean for r in history.steps])
        by_time.plot([r.wall_s for r in history.steps], smooth, marker=".", label=name)
        by_step.plot([r.step for r in history.steps], smooth, marker=".", label=name)
    for axis, xlabel in ((by_time, "wall seconds"), (by_step, "optimizer step")):
        axis.axhline(base, color="grey", linestyle=":", label="base (eval)")
        axis.axhline(target, color="black", linestyle="--", label="target")
        axis.set_xlabel(xlabel)
        axis.set_ylabel(f"train reward ({WINDOW}-step moving average)")
        axis.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--base", type=Path, default=None, help="bootstrapped policy folder (default: bootstrap now)")
    parser.add_argument("--out", type=Path, default=Path("runs/learning_curve"))
    parser.add_argument("--tasks", type=int, default=16, help="train tasks with base reward variance to train on")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=8, help="groups per optimizer step")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--staleness", type=int, default=1)
    parser.add_argument("--eval-samples", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for tiny models)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    ensure_environment(args.data)
    base_dir = args.base or bootstrap(BootstrapSpec(), args.data, Path("models/base"), progress=print).path
    spec = BootstrapReport.model_validate_json((base_dir / "bootstrap.json").read_text()).spec
    worlds = args.data / "worlds"
    candidates = [t for t in select_tasks(load_tasks(args.data), spec) if t.split is Split.TRAIN]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out / stamp
    common = dict(
        prompts_per_step=args.prompts,
        samples_per_prompt=args.samples,
        steps=args.steps,
        harness=harness_config(spec),
        trainer=TrainerConfig(lr=args.lr, algorithm=AlgorithmConfig()),
        apps=spec.apps,
        eval_samples=args.eval_samples,
        checkpoint_every=0,
        max_num_seqs=max(args.prompts, args.workers) * args.samples,
    )
    screen_config = SyncLoopConfig(**common | {"tasks": TaskFilter(tier=None, split=None)})
    varied = overfit_subset(base_dir, screen_config, worlds, candidates, len(candidates), args.eval_samples)
    train = varied[: args.tasks]
    print(f"{len(varied)} of {len(candidates)} train tasks have reward variance under the base", flush=True)
    common["tasks"] = TaskFilter(tier=None, split=None, ids=tuple(t.task_id for t in train))
    sync_config = SyncLoopConfig(**common)
    async_config = AsyncLoopConfig(**common, workers=args.workers, max_staleness=args.staleness)

    print(f"base {base_dir}  tasks {len(train)}  {args.prompts}×{args.samples} per step  lr {args.lr:g}", flush=True)
    base_reward, base_pass = evaluate_policy_dir(base_dir, sync_config, worlds, train)
    print(f"base eval: reward {base_reward:.3f}  pass {base_pass:.3f}", flush=True)

    histories: dict[str, LoopHistory] = {}
    finals: dict[str, tuple[float, float]] = {}
    for name, run, config in (("sync", run_sync_loop, sync_config), ("async", run_async_loop, async_config)):
        print(f"{name} loop:", flush=True)
        histories[name] = run(LoopJob(base_dir, train, worlds, out / name, LoopHooks(print_step(name))), config)
        final = latest_checkpoint(out / name / CHECKPOINTS)
        finals[name] = evaluate_policy_dir(final / POLICY_DIR, config, worlds, train)
        print(f"{name} eval after {args.steps} steps: reward {finals[name][0]:.3f}  pass {finals[name][1]:.3f}")

    sync_best = max(moving_average([r.reward_mean for r in histories["sync"].steps]))
    target = base_reward + 0.5 * (sync_best - base_reward)
    times = {name: time_to(history, target) for name, history in histories.items()}
    idle_s = sum(r.wait_s for r in histories["async"].steps)
    idle_share = idle_s / histories["async"].wall_s
    ratio = times["async"] / times["sync"] if times["async"] and times["sync"] else None
    plot(histories, base_reward, target, out / "learning_curve.png")

    print("\ncurve (step, train reward, wall s):")
    for name, history in histories.items():
        print(f"  {name}: " + "  ".join(f"({r.step}, {r.reward_mean:.3f}, {r.wall_s:.0f})" for r in history.steps))
    print(f"target reward {target:.3f} (midpoint of base eval {base_reward:.3f} and sync best {sync_best:.3f})")
    for name in histories:
        reached = f"{times[name]:.0f} s" if times[name] is not None else "not reached"
        print(f"  {name:5s}: target at {reached}; total {histories[name].wall_s:.0f} s")
    print(f"async / sync wall time to target: {ratio:.2f}" if ratio else "async / sync ratio: n/a (target missed)")
    bound, gen_s, train_s = overlap_bound(histories["sync"])
    if ratio:
        speedup = 1 / ratio
        print(
            f"async speed-up {speedup:.2f}× vs the overlap bound {bound:.2f}× (sync step: generate {gen_s:.1f} s, "
            f"train {train_s:.1f} s) = {speedup / bound:.2f} of the bound (goal ≥ 0.9)"
        )
    print(f"async trainer idle share (wait_for_generation_buffer): {idle_share:.1%} ({idle_s:.0f} s)")
    print(f"plot: {out / 'learning_curve.png'}")
    summary = {
        "base": {"reward": base_reward, "pass": base_pass},
        "final": {name: {"reward": r, "pass": p} for name, (r, p) in finals.items()},
        "target": target,
        "time_to_target_s": times,
        "ratio_async_over_sync": ratio,
        "async_idle_share": idle_share,
        "overlap_bound": bound,
        "curves": {name: [r.model_dump() for r in h.steps] for name, h in histories.items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
