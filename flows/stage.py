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
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from prefect.states import Failed, State

from envs.diskspace import NoSpaceLeft, no_space
from envs.errors import RecipeError
from envs.faults import FaultPlan
from envs.files import atomic_write_text
from envs.harness.config import HarnessConfig
from envs.harness.policy import PolicyHarness
from envs.harness.tool_formats import ToolFormatName
from envs.types import TaskSpec
from evals.records import EvalResult
from evals.spec import HarnessKind, JudgeSpec
from flows.config import (
    REWARD_DEFECTS,
    Defect,
    HeroRetention,
    RecipeConfig,
    StageName,
    section_digest,
    validate_config,
)
from flows.gates import GateFailed, GateReport
from flows.placement import ENGINES, TRAINERS, cluster_target, shared_root
from tasks.artifacts import log, publish_files, publish_markdown, publish_table
from tasks.catalog import Catalog
from tasks.cluster import JobRecord
from tasks.context import StageScope
from tasks.engine import EngineSettings, training_engines
from tasks.environment import policy_harness, task_sets
from tasks.evaluation import EvalJob, evaluate
from tasks.faults import FAULT_LOG, write_fault_report
from tasks.prune import pruned_work_folders
from tasks.run_lock import holding
from tasks.run_store import (
    RunStore,
    StageManifest,
    StageStatus,
    code_version,
    eval_folder_stem,
    now,
    train_folder_stem,
)
from tasks.training import TrainerRunner, TrainJob, TrainResult, retention_set, train
from tasks.validation import Suite, validate_stage
from trainer.algorithms.config import AlgorithmConfig
from trainer.local import Layout, RetentionConfig, TrainerConfig
from trainer.loops.config import LoopConfig

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


@dataclass(frozen=True)
class TrainingSetup:
    """What the training stages start from: the base policy, its harness, the run's task sets, the tuned engine."""

    policy: Path
    settings: PolicyHarness
    train: list[TaskSpec]
    heldout: list[TaskSpec]
    engine: EngineSettings

    def eval_job(self, suite: str, label: str, policy: Path, tasks: Sequence[TaskSpec], passes: int) -> EvalJob:
        """An MCP-harness eval of ``policy`` on ``tasks`` with the run's harness and the tuned engine."""
        return EvalJob(suite, label, policy, tasks, HarnessKind.MCP, passes, self.settings, self.engine)

    def training_settings(self, context_nudge: bool, changes: Mapping[str, Any] | None = None) -> PolicyHarness:
        """The run's harness with the context nudge on or off (an ablation arm, the landed config) and ``changes``
        to its other fields (an ablation stage's ``harness``)."""
        harness = HarnessConfig(
            **self.settings.harness.model_dump() | dict(changes or {}) | {"context_nudge": context_nudge}
        )
        return self.settings.model_copy(update={"harness": harness})


RETENTION_FILE = "retention.jsonl"


class StageOrderError(RecipeError, RuntimeError):
    """A stage was asked to run before the stages it builds on passed."""


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


def stage_defects(config: RecipeConfig, stage: StageName) -> list[Defect]:
    """The config's deliberate defects aimed at ``stage``: part of that stage's inputs only, so a run resumed with a
    defect re-runs its stage (and those after it) and reuses the healthy stages before it."""
    return [defect for defect in config.defects if defect.stage is stage]


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

    # --- jobs on the cluster (tasks.cluster.JobLedger) ------------------------------------------------------------

    def job(self, key: str) -> JobRecord | None:
        raw = self.manifest.jobs.get(key)
        return JobRecord.model_validate(raw) if raw is not None else None

    def record_job(self, key: str, record: JobRecord) -> None:
        """Written to the manifest at once: a flow killed a second later still knows its job."""
        self.manifest.jobs[key] = record.model_dump()
        self.store.write_manifest(self.manifest)

    def runner(self) -> TrainerRunner:
        """Where this run's training loops run (the trainer backend)."""
        target = cluster_target(self.config, self.store)
        return TRAINERS[self.config.backends.trainer].runner(self.config, target, self)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        tick = time.perf_counter()
        try:
            yield
        finally:
            self.manifest.timings[name] = round(time.perf_counter() - tick, 2)
            log("%s: %s took %.1f s", self.stage.folder, name, self.manifest.timings[name])

    def engine_settings(self, max_model_len: int, policy: str | None = None) -> EngineSettings:
        """The run's engine backend for a policy with this context: our local engine, the configured URL, or the
        run's vLLM engines serving the base ``policy`` (default: the one de-risk prepared)."""
        engine, target = self.config.engine, cluster_target(self.config, self.store)
        backend = ENGINES[self.config.backends.engine]
        fleet = backend.fleet(self.config, self.store, lambda: policy or self.policy(), max_model_len, target)
        return EngineSettings(
            max_model_len=max_model_len,
            max_num_seqs=engine.max_num_seqs,
            compile=engine.compile,
            url=engine.url,
            api_key_file=engine.api_key_file,
            served_model_name=engine.served_model_name,
            timeout_s=engine.timeout_s,
            fleet=fleet,
        )

    def policy(self) -> str:
        """The base policy (folder or hub id) the de-risk stage prepared."""
        return str(self.upstream(StageName.DERISK).outputs["policy"])

    def policy_settings(self, policy: str | None = None) -> PolicyHarness:
        """The harness every rollout of ``policy`` (default: the base) uses in this run (with this stage's
        ``wrong_tool_format`` defect: another dialect than the policy's)."""
        settings = policy_harness(policy or self.policy(), self.config.harness)
        if Defect.WRONG_TOOL_FORMAT not in self.defects:
            return settings
        written = settings.harness.tool_format
        wrong = next(name for name in ToolFormatName if name != written)
        log("defect %s: the harness reads %s, the policy writes %s", Defect.WRONG_TOOL_FORMAT.value, wrong, written)
        return settings.model_copy(update={"harness": settings.harness.model_copy(update={"tool_format": wrong})})

    @property
    def data(self) -> Path:
        """The environment build this run uses, as de-risk recorded it (``tasks.environment.prepare_environment``)."""
        return self._derisk_build("data")

    @property
    def base_data(self) -> Path:
        """The generated environment the local base was taught on: ``data`` itself, unless the run trains on a team's
        own environment (``environment.file``)."""
        return self._derisk_build("base_data") if self._derisk_outputs().get("base_data") else self.data

    def _derisk_outputs(self) -> dict[str, Any]:
        return self.manifest.outputs if self.stage is StageName.DERISK else self.upstream(StageName.DERISK).outputs

    def _derisk_build(self, name: str) -> Path:
        value = self._derisk_outputs().get(name)
        if not isinstance(value, str):
            raise StageOrderError("stage derisk recorded no environment build (run it again: recipe stage derisk)")
        return self.store.path(value)

    def task_sets(self, settings: PolicyHarness) -> tuple[list[TaskSpec], list[TaskSpec]]:
        """(train, held-out) tasks of the run for a policy with these harness settings."""
        selection = self.config.tasks
        return task_sets(self.data, selection.tiers, settings.apps, selection.policy_apps_only, selection.limit)

    def knobs(self) -> dict[str, Any]:
        """The systems stage's chosen knobs (token budget, layout, engine sequences, workers)."""
        return dict(self.upstream(StageName.SYSTEMS).outputs["knobs"])

    @property
    def defects(self) -> list[Defect]:
        """The profile's deliberate defects that this stage's gate exists to catch (the gate matrix)."""
        return stage_defects(self.config, self.stage)

    def tuned_trainer(self, algorithm: dict[str, Any] | None = None) -> TrainerConfig:
        """The profile's trainer with the systems stage's knobs (and ``algorithm`` changes, e.g. an ablation arm), and
        this stage's reward-path defect if the profile deliberately gives it one."""
        knobs = self.knobs()
        update: dict[str, Any] = {"token_budget": knobs["token_budget"], "layout": Layout(knobs["layout"])}
        changes = dict(algorithm or {})
        for defect in self.defects:
            if defect in REWARD_DEFECTS:
                log("defect %s: the trainer's algorithm.defect is %s", defect.value, REWARD_DEFECTS[defect].value)
                changes["defect"] = REWARD_DEFECTS[defect]
        if changes:
            update["algorithm"] = AlgorithmConfig(**self.config.trainer.algorithm.model_dump() | changes)
        return self.config.trainer.model_copy(update=update)

    def retention(self, section: HeroRetention) -> RetentionConfig | None:
        """The PPO-ptx term of this stage's training (None at coef 0): the base's retention set, written where the
        trainer reads it — under the run's shared root, which a cluster's nodes reach too."""
        if section.coef == 0:
            return None
        out = shared_root(self.config, self.store) / self.stage.folder / RETENTION_FILE
        with self.timed("retention_set"):
            return retention_set(Path(self.policy()), self.base_data, out, section, self.config.seed)

    def tuned_engine(self, max_model_len: int) -> EngineSettings:
        """``engine_settings`` with the systems stage's concurrent sequences."""
        settings = self.engine_settings(max_model_len)
        return replace(settings, max_num_seqs=int(self.knobs()["max_num_seqs"]))

    def work_dir(self, name: str, inputs: Any) -> Path:
        """A folder of this stage for ``name`` keyed by what goes into it (``inputs``: the loop config with its task
        ids, the eval's tasks and policy): a re-run after a kill finds it and resumes its checkpoints or trials; any
        change of input — a config edit, another subset — gets a fresh folder."""
        return self.dir / f"{name}-{section_digest(inputs)[:8]}"

    @property
    def worlds(self) -> Path:
        return self.data / "worlds"

    @property
    def scope(self) -> StageScope:
        """Where this stage's tasks record: its catalog rows, its artifact keys, the run's worlds."""
        return StageScope(self.catalog, self.stage.value, self.stage.folder, self.worlds, self.faults)

    @property
    def faults(self) -> FaultPlan | None:
        """The run's fault plan logging to this stage's ``faults.jsonl``, or None when faults are off."""
        plan = self.config.faults
        return plan.model_copy(update={"log": (self.dir / FAULT_LOG).resolve()}) if plan.enabled else None

    def training_setup(self) -> TrainingSetup:
        """The base policy, its harness, the run's task sets and the tuned engine: what a training stage starts from."""
        policy, settings = Path(self.policy()), self.policy_settings()
        train_tasks, heldout = self.task_sets(settings)
        engine = self.tuned_engine(settings.harness.context_budget_tokens)
        return TrainingSetup(policy, settings, train_tasks, heldout, engine)

    def variance_tasks(self, tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
        """Those of ``tasks`` whose base rollouts disagreed in the de-risk stage (all of them when none did)."""
        varied = set(self.upstream(StageName.DERISK).outputs["variance_tasks"])
        return [t for t in tasks if t.task_id in varied] or list(tasks)

    def validate(self, *suites: Suite) -> None:
        """Validate this stage's catalog rows of each suite (``tasks.validation.validate_stage``)."""
        for suite in suites:
            validate_stage(self.catalog, suite, self.stage.value)

    def train(self, label: str, policy: Path, tasks: Sequence[TaskSpec], loop: LoopConfig) -> TrainResult:
        """The ``train`` task for this stage: its catalog, its work folder ``train-<label>``, its progress key, the
        trainer backend's runner, and the run's engines (when it has some) to generate on."""
        return train(self.scope, self.train_job(label, policy, tasks, loop), self.runner())

    def train_job(self, label: str, policy: Path, tasks: Sequence[TaskSpec], loop: LoopConfig) -> TrainJob:
        """``loop`` from ``policy`` over ``tasks`` in its work folder (keyed by what it computes: the engines it runs
        on are not part of it), generating on the run's engines when it has some."""
        out = self.work_dir(train_folder_stem(label), [str(policy), loop.model_dump(mode="json", exclude={"engines"})])
        settings = self.engine_settings(loop.harness.context_budget_tokens)
        staging = cluster_target(self.config, self.store)
        job_dir = staging.job_dir(self.stage.folder, out) if staging else out
        engines = training_engines(settings, job_dir / "weights")
        current = partial(training_engines, settings, job_dir / "weights") if engines is not None else None
        return TrainJob(label, policy, tasks, loop.model_copy(update={"engines": engines}), out, current)

    def evaluate(self, job: EvalJob) -> EvalResult:
        """The ``evaluate`` task for this stage (seed + 1 for every policy: paired evals share sampling seeds), with the
        profile's judge when it names one."""
        judge = self.config.judge
        if judge.url and judge.model:  # tasks with llm_judge criteria are graded by the profile's judge
            job = replace(job, judge=JudgeSpec(base_url=judge.url, model=judge.model, api_key_env=judge.api_key_env))
        out = self.work_dir(eval_folder_stem(job.suite, job.label), job.inputs())
        return evaluate(self.scope, job, out, self.config.seed + 1)

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
