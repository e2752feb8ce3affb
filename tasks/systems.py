"""Systems tasks: a measured knob sweep on the local backend, and the sizing plan of the chosen knobs.

A trial runs the fully-async loop (the hero run's loop) for a few steps with one set of knobs — the trainer's
micro-batch token budget and layout, the engine's concurrent sequences, the async generation workers — and measures
what the knobs trade: seconds per step, generated tokens per second, the trainer's idle share
(Σ wait_for_generation_buffer / wall), and the train–inference |Δ logprob| of step 1 (the trainer and the engine
hold the same weights then, so it is the numeric mismatch alone).

    trials = one_factor_trials(Knobs(4096, 64, 8, Layout.PACKED), token_budget=(2048, 8192), max_num_seqs=(32,))
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.context import StageScope
from tasks.training import TrainerRunner, TrainJob, run_locally, train
from trainer.local import Layout
from trainer.loops import AsyncLoopConfig
from trainer.sizing import LocalPlan, ModelShape, local_plan


@dataclass(frozen=True)
class Knobs:
    token_budget: int
    max_num_seqs: int
    workers: int
    layout: Layout

    def label(self) -> str:
        return f"budget{self.token_budget}-seqs{self.max_num_seqs}-workers{self.workers}-{self.layout.value}"

    def apply(self, loop: AsyncLoopConfig) -> AsyncLoopConfig:
        """``loop`` with these knobs: the trainer's token budget and layout, the engine's sequences, the workers."""
        trainer = loop.trainer.model_copy(update={"token_budget": self.token_budget, "layout": self.layout})
        return loop.model_copy(update={"trainer": trainer, "max_num_seqs": self.max_num_seqs, "workers": self.workers})


def one_factor_trials(baseline: Knobs, **values: Sequence[Any]) -> list[Knobs]:
    """The baseline, then each alternative value of each knob with the others at the baseline (no repeats)."""
    trials = [baseline]
    for name, options in values.items():
        for value in options:
            trial = replace(baseline, **{name: value})
            if trial not in trials:
                trials.append(trial)
    return trials


@dataclass(frozen=True)
class TrialMetrics:
    knobs: Knobs
    steps: int
    step_s: float
    tokens_per_s: float
    idle_share: float
    logprob_mismatch: float | None

    def row(self) -> dict[str, Any]:
        measured = {k: v for k, v in asdict(self).items() if k != "knobs"}
        return {"trial": self.knobs.label(), **asdict(self.knobs), **measured}


@task(name="sweep-trial", cache_policy=NO_CACHE)
def sweep_trial(scope: StageScope, knobs: Knobs, job: TrainJob, runner: TrainerRunner = run_locally) -> TrialMetrics:
    """Train ``job`` (a loop with ``knobs`` applied: ``Knobs.apply``) through ``runner`` and measure what the knobs
    trade."""
    result = train.fn(scope, job, runner)
    records = result.history.steps
    wall = result.history.wall_s
    return TrialMetrics(
        knobs=knobs,
        steps=len(records),
        step_s=wall / len(records),
        tokens_per_s=sum(r.tokens_per_s for r in records) / len(records),
        idle_share=sum(r.wait_s for r in records) / wall if wall > 0 else 0.0,
        logprob_mismatch=records[0].logprob_abs_diff_mean,
    )


def plan(
    policy_dir: Path, knobs: Knobs, max_model_len: int, trajectory_tokens: int, staleness: int, batch: int, samples: int
) -> LocalPlan:
    """The local plan of the chosen knobs for the policy in ``policy_dir`` (fp32 trainer and engine)."""
    from safetensors import safe_open

    shape = ModelShape.from_config(json.loads((policy_dir / "config.json").read_text()))
    parameters = 0
    for weights in sorted(policy_dir.glob("*.safetensors")):
        with safe_open(str(weights), framework="pt") as handle:
            parameters += sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())  # noqa: SIM118
    return local_plan(
        shape,
        parameters,
        max_num_seqs=knobs.max_num_seqs,
        max_model_len=max_model_len,
        trajectory_tokens=max(trajectory_tokens, 1),
        max_staleness=staleness,
        prompts_per_step=batch,
        samples_per_prompt=samples,
    )
