"""A stage's training loop as a Ray Job: ``python -m trainer.cluster.train_job SPEC.json``.

The job runs the same loops as the local trainer backend (``trainer.loops``: synchronous, or fully async on the
spec's runtime), with the local trainer in this process and generation on the engines the spec names
(``LoopConfig.engines``: the run's vLLM engines, weights pushed in flight) or, without engines, on an engine of its
own. Everything it produces lands in storage the stage also reaches (``TrainJobSpec`` paths):

* checkpoints and ``history.json`` under ``out_dir`` — a resubmitted job resumes from the newest checkpoint, exactly
  as a killed local loop does;
* each step's record and rollouts as shards (``trainer.cluster.shards``), which the stage ingests into the run's
  catalog while the job runs.

A spec that names ``reserve`` claims holds them as placement groups while the loop trains (``trainer.cluster.reserve``):
on a CPU cluster that declares a GPU profile's GPUs, the job stands in for SkyRL's Megatron workers and holds exactly
their bundles, so the profile's schedule is proven by Ray itself — or fails in ``placement_timeout_s``, naming what
was missing.

The spec is written by the stage (``TrainJobSpec.write``) before the job is submitted; one line per step goes to the
job's log (the stage streams it into the Prefect run).
"""

from __future__ import annotations

import logging
import sys
from contextlib import ExitStack
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from envs.files import atomic_write_text
from envs.loaders import load_jsonl
from trainer.cluster.jobs import leave_working_dir
from trainer.cluster.ledger import Claim
from trainer.cluster.reserve import reserve
from trainer.cluster.shards import ShardWriter
from trainer.loops import (
    AsyncLoopConfig,
    LoopHistory,
    LoopHooks,
    LoopJob,
    StepRecord,
    SyncLoopConfig,
    run_async_loop,
    run_sync_loop,
)
from trainer.loops.kinds import LoopKind


class TrainJobSpec(BaseModel):
    """One training job: the loop, what it starts from and trains on, and where it writes (all on shared storage)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    kind: LoopKind
    loop: dict
    """The ``SyncLoopConfig`` / ``AsyncLoopConfig`` as JSON (``kind`` says which)."""
    policy_dir: Path
    tasks_file: Path
    """The tasks the loop may draw (``envs.loaders.save_jsonl``)."""
    worlds_root: Path
    out_dir: Path
    """Checkpoints and ``history.json`` (a resubmitted job resumes from here)."""
    shards: Path
    reserve: tuple[Claim, ...] = ()
    """Placement groups the job holds while it trains (a stand-in for SkyRL's Megatron workers); none by default."""
    placement_timeout_s: float = Field(600.0, gt=0)

    def loop_config(self) -> SyncLoopConfig | AsyncLoopConfig:
        kind = AsyncLoopConfig if self.kind is LoopKind.ASYNC else SyncLoopConfig
        return kind.model_validate(self.loop)

    def write(self, path: Path) -> None:
        atomic_write_text(path, self.model_dump_json(indent=1) + "\n")

    @classmethod
    def read(cls, path: Path) -> TrainJobSpec:
        return cls.model_validate_json(path.read_bytes())


def run(spec: TrainJobSpec) -> LoopHistory:
    """The loop of ``spec``, its steps and rollouts written as shards as they happen."""
    import torch

    torch.set_num_threads(1)  # as the local backend: one thread each for generation and training on tiny models
    writer = ShardWriter(spec.shards)

    def on_step(record: StepRecord) -> None:
        writer.step(record)
        print(f"[job {spec.label}] step {record.step}: reward {record.reward_mean:.3f}", flush=True)

    tasks = load_jsonl(spec.tasks_file)
    job = LoopJob(spec.policy_dir, tasks, spec.worlds_root, spec.out_dir, LoopHooks(on_step, writer.rollouts))
    config = spec.loop_config()
    loop = run_async_loop if isinstance(config, AsyncLoopConfig) else run_sync_loop
    with ExitStack() as held:
        if spec.reserve:
            import ray

            ray.init()  # the job's own cluster (a Ray Job's entry point is told its address)
            for claim in spec.reserve:
                held.enter_context(reserve(claim, spec.placement_timeout_s))
                print(f"[job {spec.label}] holds {claim.holder}: {claim.describe()}", flush=True)
        return loop(job, config)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m trainer.cluster.train_job SPEC.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per completion request would drown the steps
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a bar per checkpoint written, likewise
    spec = TrainJobSpec.read(Path(argv[0]))
    leave_working_dir(spec.out_dir)
    history = run(spec)
    print(f"[job {spec.label}] done: {len(history.steps)} steps in {history.wall_s:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
