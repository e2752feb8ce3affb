"""What every stage flow does around its own work: open the run, record the manifest, publish the gate, end the state.

    @flow(name="overfit")
    def overfit(run: str) -> dict:
        with open_stage(run, StageName.OVERFIT) as stage:
            ...                                   # the stage's own tasks, reading stage.config / stage.upstream(...)
            return stage.finish(report)           # dict of the passed report, or Failed(name="GateFailed")

``open_stage`` checks the earlier stages passed, marks the manifest ``running``, deletes the stage's old catalog rows
(it is running again) and, if the body raises, records ``error`` with the message before re-raising (a plain
``Failed``). ``finish`` writes ``gate.md``, the gate rows in the catalog, the manifest (``passed`` or
``gate_failed``, metrics, outputs, timings) and the keyed artifacts.

A stage's **fingerprint** hashes what it depends on — the shared config sections, its own section, and the earlier
stages' fingerprints — so a resumed pipeline reuses a passed stage exactly when nothing it depends on changed.

``StageRun`` is the stage's record and nothing else: open, upstream, output, timed, plot, finish (and the jobs it
holds on a cluster). What the stage starts from is ``flows.inputs`` (``stage.inputs()``); what it runs where is
``flows.stage_work``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect.states import Failed, State

from envs.diskspace import NoSpaceLeft, no_space
from envs.faults import FaultPlan
from envs.files import atomic_write_text
from flows.config import (
    RecipeConfig,
    StageName,
    section_digest,
    validate_config,
)
from flows.gates import GateFailed, GateReport
from flows.inputs import StageInputs, StageOrderError, stage_defects, stage_inputs
from tasks.artifacts import log, publish_files, publish_markdown, publish_table
from tasks.catalog import Catalog
from tasks.cluster import JobRecord
from tasks.faults import FAULT_LOG, write_fault_report
from tasks.prune import pruned_work_folders
from tasks.run_lock import holding
from tasks.run_store import (
    RunStore,
    StageManifest,
    StageStatus,
    code_version,
    now,
)
from tasks.validation import Suite, validate_stage

SHARED_SECTIONS = (
    "seed",
    "environment",
    "policy",
    "tasks",
    "backends",
    "engine",
    "judge",
    "sandbox",
    "harness",
    "cluster",
    "faults",
)
"""Config sections every stage depends on; its own ``stages.<name>`` section is added per stage."""
TRAINING_SECTIONS = ("trainer", "rollout")
"""Sections only the stages that train depend on (de-risk and TITO never read them: a learning-rate change must not
re-run them)."""
TRAINING_STAGES = frozenset(set(StageName) - {StageName.DERISK, StageName.TITO})
DEFAULT_RUNS_ROOT = Path("runs")


def stage_fingerprint(config: RecipeConfig, stage: StageName, store: RunStore) -> str:
    """Hash of the shared sections, the stage's own section and the fingerprints of the stages before it."""
    dumped = config.model_dump(mode="json")
    sections = SHARED_SECTIONS + (TRAINING_SECTIONS if stage in TRAINING_STAGES else ())
    upstream = []
    for earlier in list(StageName)[: stage.index - 1]:
        manifest = store.manifest(earlier.folder)
        upstream.append(manifest.fingerprint if manifest else None)
    inputs = {"shared": {name: dumped[name] for name in sections}, "stage": dumped["stages"][stage.value]}
    if defects := stage_defects(config, stage):  # only when present: a healthy run's fingerprints stay as they were
        inputs["defects"] = [defect.value for defect in defects]
    return section_digest(inputs | {"upstream": upstream})


def is_current(store: RunStore, config: RecipeConfig, stage: StageName) -> bool:
    """The stage passed with the inputs the current config gives: a resume reuses it."""
    manifest = store.manifest(stage.folder)
    return (
        manifest is not None
        and manifest.status is StageStatus.PASSED
        and manifest.fingerprint == stage_fingerprint(config, stage, store)
    )


@dataclass
class StageRun:
    """One running stage: its config, run folder, catalog and the manifest being filled."""

    stage: StageName
    config: RecipeConfig
    store: RunStore
    catalog: Catalog
    manifest: StageManifest
    started: float = field(default_factory=time.perf_counter)
    plots: dict[str, Path] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.store.stage_dir(self.stage.folder)

    @property
    def section(self) -> Any:
        return self.config.stage(self.stage)

    def upstream(self, stage: StageName) -> StageManifest:
        manifest = self.store.manifest(stage.folder)
        if manifest is None or manifest.status is not StageStatus.PASSED:
            raise StageOrderError(f"stage {self.stage.value} needs stage {stage.value} to have passed first")
        return manifest

    def upstream_path(self, stage: StageName, output: str) -> Path:
        """A path another stage recorded in its outputs (relative to the run folder)."""
        value = self.upstream(stage).outputs.get(output)
        if not isinstance(value, str):
            raise StageOrderError(f"stage {stage.value} recorded no output {output!r} (re-run it)")
        return self.store.path(value)

    def output(self, name: str, value: Any) -> None:
        """Record an output: a path (relative to the run folder when inside it, else absolute: shared storage) or a
        small JSON value."""
        self.manifest.outputs[name] = self.store.relative(value) if isinstance(value, Path) else value

    def inputs(self) -> StageInputs:
        """What this stage starts from (``flows.inputs``): the outputs of the stages before it — and de-risk's own,
        while it runs — read from their manifests."""
        outputs = {earlier: self.upstream(earlier).outputs for earlier in list(StageName)[: self.stage.index - 1]}
        outputs[self.stage] = self.manifest.outputs
        return stage_inputs(self.config, self.stage, outputs, self.store.path)

    # --- jobs on the cluster (tasks.cluster.JobLedger) ------------------------------------------------------------

    def job(self, key: str) -> JobRecord | None:
        raw = self.manifest.jobs.get(key)
        return JobRecord.model_validate(raw) if raw is not None else None

    def record_job(self, key: str, record: JobRecord) -> None:
        """Written to the manifest at once: a flow killed a second later still knows its job."""
        self.manifest.jobs[key] = record.model_dump()
        self.store.write_manifest(self.manifest)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        tick = time.perf_counter()
        try:
            yield
        finally:
            self.manifest.timings[name] = round(time.perf_counter() - tick, 2)
            log("%s: %s took %.1f s", self.stage.folder, name, self.manifest.timings[name])

    def work_dir(self, name: str, inputs: Any) -> Path:
        """A folder of this stage for ``name`` keyed by what goes into it (``inputs``: the loop config with its task
        ids, the eval's tasks and policy): a re-run after a kill finds it and resumes its checkpoints or trials; any
        change of input — a config edit, another subset — gets a fresh folder."""
        return self.dir / f"{name}-{section_digest(inputs)[:8]}"

    @property
    def faults(self) -> FaultPlan | None:
        """The run's fault plan logging to this stage's ``faults.jsonl``, or None when faults are off."""
        plan = self.config.faults
        return plan.model_copy(update={"log": (self.dir / FAULT_LOG).resolve()}) if plan.enabled else None

    def validate(self, *suites: Suite) -> None:
        """Validate this stage's catalog rows of each suite (``tasks.validation.validate_stage``)."""
        for suite in suites:
            validate_stage(self.catalog, suite, self.stage.value)

    def plot(self, name: str, path: Path) -> None:
        self.plots[name] = path

    def finish(self, report: GateReport) -> dict[str, Any] | State:
        """Record the verdict everywhere; the report's dict when it passed, a ``GateFailed`` state when not."""
        report = report.model_copy(
            update={"artifacts": {**report.artifacts, **{k: self.store.relative(p) for k, p in self.plots.items()}}}
        )
        gate_md = self.dir / "gate.md"
        atomic_write_text(gate_md, report.markdown())
        self.catalog.append(
            "gates",
            [
                {"stage": self.stage.value, "criterion": c.name, "measured": c.measured, "op": str(c.op)}
                | {"threshold": c.threshold, "passed": c.passed, "detail": c.detail}
                for c in report.criteria
            ],
        )
        if self.faults is not None:
            write_fault_report(self.catalog, self.stage.value, self.dir)
        status = StageStatus.PASSED if report.passed else StageStatus.GATE_FAILED
        self._close(status, gate=report.model_dump(mode="json"), metrics=report.metrics)
        folder = self.stage.folder
        where = f"\nRun folder: `{self.store.root.resolve()}` · this report: `{gate_md.resolve()}`\n"
        publish_markdown(folder, "gate", report.markdown() + where, report.summary())
        measured = f"{self.stage.value} of run {self.store.run_id}: what the stage measured"
        publish_table(folder, "metrics", _metric_rows(report.metrics), measured)
        publish_files(folder, self.store.root, {"gate report": gate_md, **self.plots})
        self._track()
        log("%s", report.summary())
        if report.passed:
            return report.model_dump(mode="json")
        return Failed(name="GateFailed", message=report.summary(), data=GateFailed(report.model_dump_json()))

    def _track(self) -> None:
        """This stage (and any a tracker missed) to the profile's trackers; a tracker's trouble is only a warning."""
        if not self.config.tracking.backends:
            return
        from tasks.tracking.publish import publish_run

        found = publish_run(self.store, self.config.tracking)
        if found:
            lines = "\n".join(f"- **{name}**: `{link}`" for name, link in found.items())
            publish_markdown(self.stage.folder, "tracking", f"## Trackers of run {self.store.run_id}\n\n{lines}\n")

    def _close(self, status: StageStatus, **fields: Any) -> None:
        finished = now()
        self.manifest = self.manifest.model_copy(
            update={
                "status": status,
                "finished_at": finished,
                "duration_s": round(time.perf_counter() - self.started, 2),
                **fields,
            }
        )
        self.store.write_manifest(self.manifest)


def _metric_rows(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"metric": k, "value": v} for k, v in metrics.items() if isinstance(v, int | float | str | bool)]


def open_run(run: str, runs_root: Path = DEFAULT_RUNS_ROOT) -> tuple[RunStore, RecipeConfig]:
    store = RunStore.open(runs_root, run)
    return store, validate_config(store.info().config, str(store.root / "run.json"))


@contextmanager
def open_stage(run: str, stage: StageName, runs_root: Path = DEFAULT_RUNS_ROOT) -> Iterator[StageRun]:
    """Run one stage of ``run`` (an id under ``runs_root`` or a path); see the module docstring."""
    store, config = open_run(run, runs_root)
    with holding(store.root, f"stage {stage.value}"):
        yield from _run_stage(store, config, stage)


def _run_stage(store: RunStore, config: RecipeConfig, stage: StageName) -> Iterator[StageRun]:
    for earlier in list(StageName)[: stage.index - 1]:
        manifest = store.manifest(earlier.folder)
        if manifest is None or manifest.status is not StageStatus.PASSED:
            state = manifest.status.value if manifest else "not run"
            raise StageOrderError(
                f"stage {stage.value} needs stage {earlier.value} to have passed first (it is {state}); "
                f"run it: recipe stage {earlier.value} --run {store.run_id}"
            )
    previous = store.manifest(stage.folder)
    jobs = dict(previous.jobs) if previous else {}  # a resumed stage reattaches to its jobs on the cluster
    pruned = sorted(pruned_work_folders(store, stage.folder))
    if pruned:  # a finished job there has no checkpoint left to hand on: submitted again, it trains again
        log("%s: checkpoints pruned from %s (pruned.json): a loop without one trains again", stage.folder, pruned)
        jobs = {key: job for key, job in jobs.items() if key not in pruned or job.get("status") != "SUCCEEDED"}
    manifest = StageManifest(
        stage=stage.value,
        folder=stage.folder,
        status=StageStatus.RUNNING,
        fingerprint=stage_fingerprint(config, stage, store),
        config_hash=config.digest(),
        code_version=code_version(),
        attempt=(previous.attempt if previous else 0) + 1,
        started_at=now(),
        jobs=jobs,
    )
    store.write_manifest(manifest)
    catalog = Catalog(store.catalog_path)
    catalog.clear_stage(stage.value)
    (store.root / stage.folder / FAULT_LOG).unlink(missing_ok=True)  # the faults of an earlier attempt
    running = StageRun(stage, config, store, catalog, manifest)
    log("%s: started (run %s, attempt %d)", stage.folder, store.run_id, manifest.attempt)
    try:
        yield running
    except BaseException as error:
        full = no_space(error)
        if full is None:
            running._close(StageStatus.ERROR, error=f"{type(error).__name__}: {error}"[:2000])
            raise
        plain = NoSpaceLeft.of(full, near=running.dir)  # the stage's error says so, whatever wrapped the OSError
        try:
            running._close(StageStatus.ERROR, error=str(plain))
        except OSError:  # the manifest cannot be written on a full disk either; the error still says why
            log("%s: %s (the manifest could not record it)", stage.folder, plain)
        raise plain from error
    if running.manifest.status is StageStatus.RUNNING:
        running._close(StageStatus.ERROR, error="the stage ended without a gate report")
        raise RuntimeError(f"stage {stage.value} ended without calling finish(report)")
