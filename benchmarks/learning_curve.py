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
sync; noisy: a target reached within the first steps is flagged), the async trainer's idle share (Σ
wait_for_generation_buffer / wall), and the async speed-up: groups with reward variance trained per steady-state wall
second, async over sync (an async step refills the groups it drops, a sync step trains on fewer), against the most
overlapping generation with training can give — ``1 + min(g, t) / max(g, t)`` if each phase kept one core
busy, and ``(g + t) / max(g, t, (g·c_g + t·c_t) / cores)`` with the cores each phase of the sync loop was measured to
keep busy (CPU seconds of this process and its tool subprocesses over wall seconds). A PNG of both curves lands in
``<out>/learning_curve.png``. ``--runtime subprocess`` puts the async loop's trainer in a child process, ``ray`` its
engine and trainer in two Ray actors.

    .venv/bin/python benchmarks/learning_curve.py --base models/base/<hash> --data data --steps 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    RuntimeKind,
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


def loop_settings(spec: BootstrapSpec, args: argparse.Namespace, checkpoint_every: int) -> dict[str, Any]:
    """The loop fields the learning benchmarks share: ``args``' group shape, steps and Adam ``lr`` with the hero
    algorithm, the base's harness and apps, room in the engine for every worker's group."""
    return dict(
        prompts_per_step=args.prompts,
        samples_per_prompt=args.samples,
        steps=args.steps,
        harness=harness_config(spec),
        trainer=TrainerConfig(lr=args.lr, algorithm=AlgorithmConfig()),
        apps=spec.apps,
        eval_samples=args.eval_samples,
        checkpoint_every=checkpoint_every,
        max_num_seqs=max(args.prompts, args.workers) * args.samples,
    )


def moving_average(values: list[float], window: int = WINDOW) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start)."""
    return [sum(values[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and its finished children (tool subprocesses)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


@dataclass
class PhaseMeter:
    """Wall and CPU seconds of the sync loop's two phases, read at its hooks: generation ends when the step's
    rollouts are reported, training (with the weight push) when the step is. Step 1 is left out (it includes
    opening the policy)."""

    mark: tuple[float, float] = field(default_factory=lambda: (time.perf_counter(), cpu_seconds()))
    phases: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: {"generate": [], "train": []})

    def lap(self, phase: str, step: int) -> None:
        now = (time.perf_counter(), cpu_seconds())
        if step > 1:
            self.phases[phase].append((now[0] - self.mark[0], now[1] - self.mark[1]))
        self.mark = now

    def wall_and_cores(self, phase: str) -> tuple[float, float]:
        """Mean wall seconds per step of ``phase`` and the cores it kept busy (CPU seconds / wall seconds)."""
        laps = self.phases[phase]
        wall, cpu = sum(w for w, _ in laps), sum(c for _, c in laps)
        return wall / max(len(laps), 1), cpu / max(wall, 1e-9)


def overlap_bounds(meter: PhaseMeter, cores: int) -> tuple[float, float]:
    """The most an async loop can speed a step up by overlapping generation (g seconds, c_g cores busy) with
    training (t seconds, c_t cores) on ``cores`` cores. Phases on one core each: ``1 + min(g, t) / max(g, t)``
    (perfect overlap hides the shorter phase). With the measured core use the step cannot take less than the longer
    phase nor less than its CPU work spread over every core: ``(g + t) / max(g, t, (g·c_g + t·c_t) / cores)``."""
    (g, c_g), (t, c_t) = meter.wall_and_cores("generate"), meter.wall_and_cores("train")
    if max(g, t) <= 0:
        return 1.0, 1.0
    return 1 + min(g, t) / max(g, t), (g + t) / max(g, t, (g * c_g + t * c_t) / cores)


def seconds_per_step(history: LoopHistory) -> float:
    """Steady-state wall seconds per optimizer step: from the end of step 1 to the end of the last step, so the async
    loop's first fill of its buffer (no step can train before B groups exist) does not count against it."""
    first, last = history.steps[0], history.steps[-1]
    return (last.wall_s - first.wall_s) / (last.step - first.step) if last.step > first.step else last.wall_s


def signal_groups_per_s(history: LoopHistory, prompts_per_step: int, samples: int, refills: bool) -> float:
    """Steady-state groups with reward variance trained on per wall second (after step 1). The unit of work the two
    loops share: the sync loop generates B groups a step and trains on those with signal (B − dropped); the async
    loop refills dropped groups and trains on B with signal (``refills``), so its steps carry more work."""
    first, last = history.steps[0], history.steps[-1]
    later = history.steps[1:]
    groups = sum(r.trajectories / samples if refills else prompts_per_step - r.groups_dropped for r in later)
    return groups / (last.wall_s - first.wall_s) if later else 0.0


def time_to(history: LoopHistory, target: float) -> float | None:
    """Wall seconds at the first step whose moving-average train reward reaches ``target`` (None: never)."""
    smooth = moving_average([r.reward_mean for r in history.steps])
    return next((r.wall_s for r, s in zip(history.steps, smooth, strict=True) if s >= target), None)


def history_wall_at(history: LoopHistory, step: int) -> float:
    """Wall seconds at the end of ``step`` (the last step's when the run was shorter)."""
    return next((r.wall_s for r in history.steps if r.step >= step), history.steps[-1].wall_s)


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
    # the local profile's async settings (deployments/profiles/local.yaml)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--staleness", type=int, default=2)
    parser.add_argument("--eval-samples", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for tiny models)")
    parser.add_argument(
        "--runtime",
        choices=[k.value for k in RuntimeKind],
        default=RuntimeKind.SUBPROCESS.value,
        help="the async loop's trainer in a child process (subprocess), a thread (asyncio) or a Ray actor (ray)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    ensure_environment(args.data)
    base_dir = args.base or bootstrap(BootstrapSpec(), args.data, Path("models/base"), progress=print).path
    spec = BootstrapReport.model_validate_json((base_dir / "bootstrap.json").read_text()).spec
    worlds = args.data / "worlds"
    candidates = [t for t in select_tasks(load_tasks(args.data), spec) if t.split is Split.TRAIN]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out / stamp
    common = loop_settings(spec, args, checkpoint_every=0)
    screen_config = SyncLoopConfig(**common | {"tasks": TaskFilter(tier=None, split=None)})
    varied = overfit_subset(base_dir, screen_config, worlds, candidates, len(candidates), args.eval_samples)
    train = varied[: args.tasks]
    print(f"{len(varied)} of {len(candidates)} train tasks have reward variance under the base", flush=True)
    common["tasks"] = TaskFilter(tier=None, split=None, ids=tuple(t.task_id for t in train))
    sync_config = SyncLoopConfig(**common)
    async_config = AsyncLoopConfig(
        **common, workers=args.workers, max_staleness=args.staleness, runtime=RuntimeKind(args.runtime)
    )

    print(f"base {base_dir}  tasks {len(train)}  {args.prompts}×{args.samples} per step  lr {args.lr:g}", flush=True)
    base_reward, base_pass = evaluate_policy_dir(base_dir, sync_config, worlds, train)
    print(f"base eval: reward {base_reward:.3f}  pass {base_pass:.3f}", flush=True)

    histories: dict[str, LoopHistory] = {}
    meter = PhaseMeter()
    finals: dict[str, tuple[float, float]] = {}
    for name, run, config in (("sync", run_sync_loop, sync_config), ("async", run_async_loop, async_config)):
        print(f"{name} loop:", flush=True)
        show = print_step(name)
        if name == "sync":

            def on_step(record: StepRecord, show=show) -> None:
                meter.lap("train", record.step)
                show(record)

            hooks = LoopHooks(on_step, lambda step, _: meter.lap("generate", step))
        else:
            hooks = LoopHooks(show)
        histories[name] = run(LoopJob(base_dir, train, worlds, out / name, hooks), config)
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
    early = [
        name
        for name, seconds in times.items()
        if seconds is not None and seconds <= history_wall_at(histories[name], WINDOW)
    ]
    note = f" (reached within the first {WINDOW} steps by {', '.join(early)}: noise, not learning)" if early else ""
    print(
        f"async / sync wall time to target: {ratio:.2f}{note}" if ratio else "async / sync ratio: n/a (target missed)"
    )
    cores = os.cpu_count() or 1
    one_core_bound, bound = overlap_bounds(meter, cores)
    (gen_s, gen_cores), (train_s, train_cores) = meter.wall_and_cores("generate"), meter.wall_and_cores("train")
    per_step = {name: seconds_per_step(history) for name, history in histories.items()}
    rates = {
        name: signal_groups_per_s(history, args.prompts, args.samples, refills=name == "async")
        for name, history in histories.items()
    }
    speedup = rates["async"] / rates["sync"]
    print(
        f"groups with signal trained per second (steady state, after step 1): sync {rates['sync']:.2f}, async "
        f"{rates['async']:.2f} ({args.runtime}) → async speed-up {speedup:.2f}× = {speedup / one_core_bound:.2f} of "
        f"the one-core-per-phase bound, {speedup / bound:.2f} of the measured-core bound (goal ≥ 0.9)"
    )
    print(
        f"seconds per step: sync {per_step['sync']:.2f}, async {per_step['async']:.2f} (an async step trains on "
        f"{args.prompts} groups with signal, a sync step on those of its {args.prompts} that have it)"
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
        "overlap_bound": {"one_core_per_phase": one_core_bound, "measured_cores": bound},
        "phases": {"generate": [gen_s, gen_cores], "train": [train_s, train_cores]},
        "seconds_per_step": per_step,
        "signal_groups_per_s": rates,
        "runtime": args.runtime,
        "curves": {name: [r.model_dump() for r in h.steps] for name, h in histories.items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
