"""A stage's training loop as a Ray Job: ``python -m trainer.cluster.train_job SPEC.json``.

The job runs the same loops as the local trainer backend (``trainer.loops``: synchronous, or fully async on the
spec's runtime), with the local trainer in this process and generation on the engines the spec names
(``LoopConfig.engines``: the run's vLLM engines, weights pushed in flight) or, without engines, on an engine of its
own. Everything it produces lands in storage the stage also reaches (``TrainJobSpec`` paths):

* checkpoints and ``history.json`` under ``out_dir`` — a resubmitted job resumes from the newest checkpoint, exactly
  as a killed local loop does;
* each step's record and rollouts as shards (``trainer.cluster.shards``), which the stage ingests into the run's
  catalog while the job runs.

The spec is written by the stage (``TrainJobSpec.write``) before the job is submitted; one line per step goes to the
job's log (the stage streams it into the Prefect run).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from envs.files import atomic_write_text
from envs.loaders import load_jsonl
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
    if isinstance(config, AsyncLoopConfig):
        return run_async_loop(job, config)
    return run_sync_loop(job, config)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m trainer.cluster.train_job SPEC.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per completion request would drown the steps
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a bar per checkpoint written, likewise
    spec = TrainJobSpec.read(Path(argv[0]))
    history = run(spec)
    print(f"[job {spec.label}] done: {len(history.steps)} steps in {history.wall_s:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
