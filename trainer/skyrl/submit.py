"""Submit a SkyRL run as a Ray Job (``trainer.cluster.jobs``), follow its log, and read its metrics into
``train_steps`` rows.

The job's entry point is ``python -m <module> <overrides...>``: SkyRL's trainer with our generator
(``ENTRY_MODULE``), or the dry-run stand-in (``DRY_RUN_MODULE``) that checks the overrides and prints metric blocks
computed from them, so the whole path runs on a CPU-only cluster. The cluster needs the repository's dependencies for
the module it runs (the dry run: PyYAML only) and, for a real run, SkyRL with Megatron and vLLM (the ``cluster``
extra) on every node.

    outcome = submit_job("http://127.0.0.1:8265", overrides.lines(), module=DRY_RUN_MODULE, timeout_s=300)
    outcome.status, outcome.rows          # "SUCCEEDED", [{"stage": "hero", "step": 1, ...}, ...]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.cluster.jobs import JobCommand, RayJobs
from trainer.skyrl.metrics import metric_blocks, train_step_rows

DRY_RUN_MODULE = "trainer.skyrl.dryrun"
ENTRY_MODULE = "trainer.skyrl.main"
"""The real run's entry point: SkyRL's fully-async trainer with our harness as its generator (``generator``)."""


@dataclass(frozen=True)
class JobOutcome:
    job_id: str
    status: str
    """SUCCEEDED | FAILED | STOPPED, or TIMEOUT when the job outlived ``timeout_s`` (it is then stopped)."""
    logs: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    """``train_steps`` rows from the log's metric blocks."""

    @property
    def succeeded(self) -> bool:
        return self.status == "SUCCEEDED"


def outcome(jobs: RayJobs, job_id: str, status: str, stage: str = "hero", run: str = "skyrl") -> JobOutcome:
    """The job's final log and the ``train_steps`` rows of its metric blocks."""
    logs = jobs.logs(job_id)
    rows = train_step_rows(metric_blocks(logs.splitlines()), stage=stage, run=run)
    return JobOutcome(job_id=job_id, status=status, logs=logs, rows=rows)


def submit_job(
    address: str,
    overrides: Sequence[str],
    *,
    module: str = DRY_RUN_MODULE,
    python: str = "python",
    env_vars: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
    request_timeout_s: float = 30.0,
    echo: Callable[[str], None] | None = None,
    stage: str = "hero",
    run: str = "skyrl",
) -> JobOutcome:
    """Submit ``python -m module overrides...`` to the cluster at ``address`` and follow it to the end."""
    jobs = RayJobs(address, request_timeout_s)
    job_id = jobs.submit(JobCommand(module, list(overrides), python, dict(env_vars or {})))
    if echo:
        echo(f"[submit] job {job_id} submitted to {address}\n")
    status = jobs.follow(job_id, timeout_s=timeout_s, on_log=echo)
    return outcome(jobs, job_id, status, stage, run)
