"""Our RL loop next to TRL's ``GRPOTrainer``: same base, tasks, tools, group size, prompts per step, learning rate,
token budget and steps; the same held-out evaluation (ours) of both sides' checkpoints. Run by ``make bench-trl``
in ``.venv-trl`` (TRL 1.16 layered on the main venv, so both sides use the very same torch and transformers).

* **Base and tasks**: the profile's bootstrapped base (``--profile local``: the demo's) and its toy tier; training on
  the first ``--tasks`` train tasks whose base rollouts disagree (the recipe's overfit-subset rule), evaluation on
  ``--heldout`` held-out tasks, ``--eval-samples`` rollouts each, the same sampling seeds for every checkpoint.
* **Ours**: the synchronous loop and the fully-async loop (``trainer.loops``; the hero algorithm: GRPO without std,
  prompt_mean, DPPO binary-TV), our engine; checkpoints every ``--eval-every`` steps.
* **TRL**: ``GRPOTrainer`` with ``environment_factory`` (``benchmarks/trl_bridge.py``: our apps as the environment's
  methods on a private world copy, our grader as the reward), generation by transformers ``generate``; GRPO without
  std (``scale_rewards="none"``), no KL (``beta=0``), TRL's default loss, AdamW with our betas / weight decay / clip,
  constant learning rate. TRL's first prompt is checked to be token for token our harness's. TRL bounds the whole
  multi-turn completion (``max_completion_length`` = the context budget less the longest prompt) and tool rounds
  (``max_tool_calling_iterations`` = max_turns − 1), not each turn: said in the table's notes.

Printed: per side seconds per step, trajectories and sampled tokens per second, held-out Pass@1 after N steps with the
paired 95 % CI against TRL's, the wall-clock at which each side's held-out Pass@1 first reached the best of TRL's
checkpoints (evaluated after training, off the clock), and the share of wall-clock each synchronous trainer spends
generating. ``summary.json`` in ``--out`` keeps every number.

    .venv-trl/bin/python benchmarks/vs_trl.py --steps 12 --eval-every 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import transformers
from learning_curve import loop_settings, overfit_subset, print_step
from trl_bridge import first_prompt_matches, grade_rewards, system_prompt, tool_environment, trl_tokenizer

from envs.apps.base import World
from envs.build import environment_build, load_tasks
from envs.harness.agent import AgentSetup
from envs.harness.chat import initial_messages, prompt_ids
from envs.harness.tools import LocalToolSession
from envs.types import Split, TaskSpec
from evals.compare import paired_comparison
from evals.types import Metric, TrialResult
from flows.config.profile import load_profile
from trainer.bootstrap import BootstrapReport, bootstrap, harness_config, select_tasks
from trainer.engine import Engine
from trainer.local.checkpoint import POLICY_DIR
from trainer.loops import (
    AsyncLoopConfig,
    LoopHooks,
    LoopJob,
    RuntimeKind,
    SyncLoopConfig,
    TaskFilter,
    run_async_loop,
    run_sync_loop,
)
from trainer.loops.config import LoopConfig
from trainer.loops.engine_adapter import InProcessEngine
from trainer.loops.policy import CHECKPOINTS
from trainer.loops.rollouts import Rollouts, default_envs
from trainer.model import load_policy

POLICY_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "harness.json", "bootstrap.json")
"""What a TRL checkpoint takes from the base to be a policy folder our harness loads (its own tokenizer files carry
TRL's template)."""


@dataclass
class Side:
    """One trainer's run: wall seconds and trajectories / sampled tokens at each step, its policy at some steps."""

    name: str
    wall_s: dict[int, float] = field(default_factory=dict)
    trajectories: dict[int, int] = field(default_factory=dict)
    tokens: dict[int, float] = field(default_factory=dict)
    checkpoints: dict[int, Path] = field(default_factory=dict)
    generate_s: float = 0.0
    """Seconds spent generating (sampling and tool calls), all steps."""
    heldout: dict[int, list[TrialResult]] = field(default_factory=dict)

    def pass_at_1(self, step: int) -> float:
        trials = self.heldout[step]
        return sum(t.passed for t in trials) / len(trials)

    def rates(self) -> tuple[float, float, float]:
        """(seconds per step, trajectories per second, sampled tokens per second) over the steps after the first."""
        steps = sorted(self.wall_s)
        later = steps[1:] or steps
        span = self.wall_s[steps[-1]] - (self.wall_s[steps[0]] if len(steps) > 1 else 0.0)
        return (
            span / len(later),
            sum(self.trajectories[s] for s in later) / span,
            sum(self.tokens[s] for s in later) / span,
        )


def held_out(policy: Path, config: LoopConfig, worlds: Path, tasks: Sequence[TaskSpec], n: int) -> list[TrialResult]:
    """``n`` rollouts of each task by ``policy`` through our harness and engine, with the same seeds for every policy
    (paired); a rollout that failed for infra reasons is left out."""
    model, tokenizer = load_policy(policy)
    with Engine(model, tokenizer, config.engine_config()) as engine:
        agent = AgentSetup(InProcessEngine(engine), tokenizer, config.harness)
        groups = asyncio.run(Rollouts(default_envs(worlds, config.apps), agent, seed=config.seed + 1).sample(tasks, n))
    return [
        TrialResult(task_id=task.task_id, pass_index=index, passed=t.passed, reward=t.reward)
        for task, group in zip(tasks, groups, strict=True)
        for index, t in enumerate(group)
    ]


def keep_checkpoints(written: Path, kept: Path) -> None:
    """Copy each checkpoint of ``written`` not yet in ``kept``: a loop keeps only its newest three, and every one is
    evaluated afterwards (a copy made at each step is never late: three more are written before one is pruned)."""
    for folder in sorted(written.glob("step-*")):
        if not (kept / folder.name).exists() and (folder / POLICY_DIR / "config.json").exists():
            shutil.copytree(folder / POLICY_DIR, kept / folder.name)


def run_ours(name: str, run: Callable[..., Any], job: LoopJob, config: LoopConfig) -> Side:
    side = Side(name)
    written, kept = job.out_dir / CHECKPOINTS, job.out_dir / "kept"
    show = job.hooks.on_step if job.hooks else None

    def on_step(record: Any) -> None:
        keep_checkpoints(written, kept)  # a tiny policy: ~10 ms a copy, inside both loops' clocks alike
        if show is not None:
            show(record)

    job = replace(job, hooks=LoopHooks(on_step))
    started = time.perf_counter()
    history = run(job, config)
    keep_checkpoints(written, kept)
    print(f"{name}: {len(history.steps)} steps in {time.perf_counter() - started:.0f} s", flush=True)
    previous = 0.0
    side.generate_s = sum(record.generate_s for record in history.steps)
    for record in history.steps:  # tokens_per_s is over the step's own wall time
        side.wall_s[record.step] = record.wall_s
        side.trajectories[record.step] = record.trajectories
        side.tokens[record.step] = record.tokens_per_s * (record.wall_s - previous)
        previous = record.wall_s
    for folder in sorted(kept.glob("step-*")):
        side.checkpoints[int(folder.name.split("-")[1])] = folder
    return side


def run_trl(
    base: Path, train: Sequence[TaskSpec], worlds: Path, spec: Any, args: argparse.Namespace, out: Path
) -> Side:
    """TRL's GRPOTrainer on ``train`` from ``base`` (module docstring); its checkpoints made into policy folders."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    harness = harness_config(spec)
    model, tokenizer = load_policy(base)
    model.train()
    tokenizer = trl_tokenizer(tokenizer, harness.tool_format)
    environment = tool_environment(train, worlds, spec.apps)
    system = system_prompt(harness, spec.apps)
    rows = [
        {"prompt": [{"role": "system", "content": system}, {"role": "user", "content": t.prompt}], "task_id": t.task_id}
        for t in train
    ]
    specs = asyncio.run(LocalToolSession(World(worlds / train[0].world_id), apps=spec.apps).list_tools())
    ours = prompt_ids(
        tokenizer, initial_messages(harness.system_prompt, train[0].prompt), specs, harness.tool_listing,
        harness.tool_format, harness.thinking,
    )  # fmt: skip
    probe = environment()
    tools = [getattr(probe, name) for name in dir(environment) if not name.startswith("_") and name != "reset"]
    if not first_prompt_matches(tokenizer, ours, rows[0]["prompt"], tools):
        raise SystemExit("TRL's first prompt differs from our harness's: the comparison would not be like for like")
    longest = max(len(tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True)) for r in rows)
    config = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="steps",
        save_steps=args.eval_every,
        save_only_model=True,
        max_steps=args.steps,
        per_device_train_batch_size=args.prompts * args.samples,
        gradient_accumulation_steps=1,
        num_generations=args.samples,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.98,
        weight_decay=0.01,
        max_grad_norm=1.0,
        beta=0.0,
        scale_rewards="none",
        temperature=harness.temperature,
        max_completion_length=harness.context_budget_tokens - longest,
        max_tool_calling_iterations=harness.max_turns - 1,
        seed=args.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    side = Side("trl")

    class Clock(TrainerCallback):
        started = time.perf_counter()

        def on_train_begin(self, *_: Any, **__: Any) -> None:
            Clock.started = time.perf_counter()

        def on_log(self, _args: Any, state: Any, _control: Any, logs: dict | None = None, **__: Any) -> None:
            if logs and "reward" in logs:
                step = state.global_step
                side.wall_s[step] = time.perf_counter() - Clock.started
                side.trajectories[step] = args.prompts * args.samples
                side.tokens[step] = logs.get("completions/mean_length", 0.0) * args.prompts * args.samples
                reward, wall = logs["reward"], side.wall_s[step]
                print(f"  trl   step {step:3d}  reward {reward:.3f}  wall {wall:7.1f}s", flush=True)

    class TimedGRPOTrainer(GRPOTrainer):
        """TRL's trainer, its generation (sampling and tool calls: ``_generate``) timed apart from the rest."""

        def _generate(self, prompts: list) -> Any:
            started = time.perf_counter()
            try:
                return super()._generate(prompts)
            finally:
                side.generate_s += time.perf_counter() - started

    trainer = TimedGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[grade_rewards],
        args=config,
        train_dataset=Dataset.from_list(rows * (args.steps * args.prompts // len(rows) + 1)),
        environment_factory=environment,
        callbacks=[Clock()],
    )
    trainer.remove_callback(PrinterCallback)  # its log dicts: the Clock prints one line a step instead
    trainer.train()
    for folder in sorted(out.glob("checkpoint-*")):
        for name in POLICY_FILES:
            if (base / name).exists():
                shutil.copy2(base / name, folder / name)  # our tokenizer files and harness, not TRL's template
        side.checkpoints[int(folder.name.split("-")[1])] = folder
    return side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="local", help="whose base and environment (default: the demo's)")
    parser.add_argument("--out", type=Path, default=Path("runs/vs_trl"))
    parser.add_argument("--tasks", type=int, default=8, help="train tasks with base reward variance to train on")
    parser.add_argument("--heldout", type=int, default=24, help="held-out tasks evaluated")
    parser.add_argument("--samples", type=int, default=4, help="group size G")
    parser.add_argument("--prompts", type=int, default=4, help="groups per optimizer step")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--eval-every", type=int, default=4, help="checkpoint (and evaluate) every this many steps")
    parser.add_argument("--eval-samples", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--workers", type=int, default=12, help="the async loop's workers (the local profile's)")
    parser.add_argument("--staleness", type=int, default=2)
    parser.add_argument(
        "--runtime", choices=[k.value for k in RuntimeKind], default=RuntimeKind.SUBPROCESS.value,
        help="the async loop's trainer in a child process (default, as make learn), a thread or a Ray actor",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for tiny models)")
    parser.add_argument("--sides", default="sync,async,trl", help="which trainers to run, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of every side; each side's fastest is kept")
    parser.add_argument("--seed", type=int, default=0, help="every side's training seed (the task screen keeps 0)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"  # environment_factory is experimental in TRL 1.16: said above
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames of checkpointing methods
    transformers.logging.set_verbosity_error()

    profile = load_profile(args.profile)
    environment = profile.environment
    data = environment_build(environment.data, environment.seed, environment.worlds_per_domain)
    base = bootstrap(profile.policy.bootstrap, data, profile.policy.cache, progress=print).path
    spec = BootstrapReport.model_validate_json((base / "bootstrap.json").read_text()).spec
    worlds, tasks = data / "worlds", select_tasks(load_tasks(data), spec)
    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    common = loop_settings(spec, args, checkpoint_every=args.eval_every)
    screen = SyncLoopConfig(**common | {"tasks": TaskFilter(tier=None, split=None)})
    candidates = [t for t in tasks if t.split is Split.TRAIN]
    train = overfit_subset(base, screen, worlds, candidates, args.tasks, args.eval_samples)
    heldout = [t for t in tasks if t.split is Split.HELDOUT][: args.heldout]
    common["tasks"] = TaskFilter(tier=None, split=None, ids=tuple(t.task_id for t in train))
    common["seed"] = args.seed
    sync_config = SyncLoopConfig(**common)
    async_config = AsyncLoopConfig(
        **common, workers=args.workers, max_staleness=args.staleness, runtime=RuntimeKind(args.runtime)
    )
    print(
        f"base {base}; {len(train)} train tasks with variance, {len(heldout)} held-out; {args.prompts}×{args.samples} "
        f"per step, {args.steps} steps, lr {args.lr:g}; torch {torch.__version__}",
        flush=True,
    )

    def ours(name: str, run: Callable[..., Any], config: LoopConfig, folder: Path) -> Side:
        hooks = LoopHooks(print_step(name.split()[-1]))
        return run_ours(name, run, LoopJob(base, train, worlds, folder, hooks), config)

    runners: dict[str, Callable[[Path], Side]] = {
        "ours sync": lambda folder: ours("ours sync", run_sync_loop, sync_config, folder),
        "ours async": lambda folder: ours("ours async", run_async_loop, async_config, folder),
        "trl": lambda folder: run_trl(base, train, worlds, spec, args, folder),
    }
    wanted = {"sync": "ours sync", "async": "ours async", "trl": "trl"}
    names = [wanted[side] for side in args.sides.split(",")]
    sides: dict[str, Side] = {}
    for repeat in range(args.repeats):  # interleaved: every side once per round, the machine's hour shared alike
        for name in names:
            side = runners[name](out / f"{name.replace(' ', '-')}-{repeat}")
            if name not in sides or side.wall_s[max(side.wall_s)] < sides[name].wall_s[max(sides[name].wall_s)]:
                sides[name] = side  # best of the rounds: the least wall-clock to the last step
    print("held-out evaluation (off the clock)", flush=True)
    base_trials = held_out(base, sync_config, worlds, heldout, args.eval_samples)
    for side in sides.values():
        for step, policy in sorted(side.checkpoints.items()):
            side.heldout[step] = held_out(policy, sync_config, worlds, heldout, args.eval_samples)
            print(f"  {side.name} step {step}: held-out Pass@1 {side.pass_at_1(step):.3f}", flush=True)
    report(sides, base_trials, args, out)


def report(sides: dict[str, Side], base_trials: list[TrialResult], args: argparse.Namespace, out: Path) -> None:
    base_pass = sum(t.passed for t in base_trials) / len(base_trials)
    reference = sides.get("trl")
    final = {name: max(side.heldout) for name, side in sides.items() if side.heldout}
    # the most TRL reached at any checkpoint: the bar most favourable to TRL
    target = max(map(reference.pass_at_1, reference.heldout)) if reference and reference.heldout else None
    rows, summary = [], {"base_pass_at_1": base_pass, "target": target, "sides": {}}
    for name, side in sides.items():
        seconds, trajectories, tokens = side.rates()
        step = final.get(name)
        passed = side.pass_at_1(step) if step is not None else None
        reached = None
        if target is not None:
            reached = next((side.wall_s[s] for s in sorted(side.heldout) if side.pass_at_1(s) >= target), None)
        delta = ""
        if reference is not None and name != "trl" and step is not None and "trl" in final:
            c = paired_comparison(reference.heldout[final["trl"]], side.heldout[step], Metric.PASS_AT_1)
            delta = f"{c.mean_diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}]"
            summary.setdefault("vs_trl", {})[name] = c.model_dump(mode="json")
        rows.append((name, seconds, trajectories, tokens, passed, delta, reached))
        summary["sides"][name] = {
            "seconds_per_step": seconds,
            "trajectories_per_s": trajectories,
            "tokens_per_s": tokens,
            "heldout_pass_at_1": {str(s): side.pass_at_1(s) for s in sorted(side.heldout)},
            "wall_s": {str(s): w for s, w in side.wall_s.items()},
            "wall_to_trl_best_pass_at_1_s": reached,
            "generate_share": side.generate_s / side.wall_s[max(side.wall_s)],
        }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
    print(
        f"\nvs TRL — {time.strftime('%Y-%m-%d %H:%M')} commit {commit.stdout.strip()}: {args.steps} steps, "
        f"{args.prompts}×{args.samples} per step, lr {args.lr:g}; base held-out Pass@1 {base_pass:.3f}"
    )
    print("| trainer | s/step | trajectories/s | tokens/s ¹ | held-out Pass@1 | Δ vs TRL [95% CI] | to TRL's best ² |")
    print("|---|---|---|---|---|---|---|")
    for name, seconds, trajectories, tokens, passed, delta, reached in rows:
        shown = "—" if passed is None else f"{passed:.3f}"
        wall = "not reached" if reached is None else f"{reached:.0f} s"
        print(f"| {name} | {seconds:.2f} | {trajectories:.2f} | {tokens:.0f} | {shown} | {delta} | {wall} |")
    print(
        "¹ ours: sampled tokens; TRL: its completion length, tool results included (TRL logs no sampled-only count). "
        f"² wall-clock of the first checkpoint (every {args.eval_every} steps) whose held-out Pass@1 reached the best "
        f"of TRL's checkpoints ({target}); best of {args.repeats} interleaved rounds per side, evaluated off the clock."
    )
    shares = [
        f"{name} {summary['sides'][name]['generate_share']:.0%}" for name in ("ours sync", "trl") if name in sides
    ]
    if shares:
        print(f"wall-clock share in generation (sampling + tools): {', '.join(shares)} (async overlaps the two)")
    if "trl" in sides and "ours async" in sides:
        trl_wall = summary["sides"]["trl"]["wall_to_trl_best_pass_at_1_s"]
        ours_wall = summary["sides"]["ours async"]["wall_to_trl_best_pass_at_1_s"]
        if trl_wall and ours_wall:
            print(
                f"TRL's wall-clock / ours async to TRL's best held-out Pass@1: {trl_wall / ours_wall:.2f}× (goal ≥ 3×)"
            )
        elif trl_wall:
            print("ours async never reached TRL's best held-out Pass@1 at a checkpoint")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"summary: {out / 'summary.json'}")


if __name__ == "__main__":
    main()
