"""What a stage runs and where: its engines and trainer from the placement registries, its training loops and evals
as the stage's Prefect tasks, recorded into the stage's catalog and work folders.

``StageWork(run, inputs)`` joins the stage's record (``flows.stage.StageRun``) and what it starts from
(``flows.inputs.StageInputs``); it holds no state of its own.

    with open_stage(run, StageName.OVERFIT) as stage:
        work = StageWork.of(stage)
        setup = work.training_setup()
        trained = work.train("overfit", setup.policy, subset, loop)
        after = work.evaluate(setup.eval_job("subset", "trained", trained.policy, subset, passes=4))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from envs.harness.config import HarnessConfig
from envs.harness.policy import PolicyHarness
from envs.types import TaskSpec
from evals.records import EvalResult
from evals.spec import HarnessKind, JudgeSpec
from flows.config import HeroRetention
from flows.inputs import StageInputs
from flows.placement import ENGINES, TRAINERS, FleetRequest, cluster_target, shared_root
from flows.stage import StageRun
from tasks.context import StageScope
from tasks.engine import EngineSettings, training_engines
from tasks.evaluation import EvalJob, evaluate
from tasks.run_store import eval_folder_stem, train_folder_stem
from tasks.training import TrainerRunner, TrainJob, TrainResult, retention_set, train
from trainer.local import RetentionConfig
from trainer.loops.config import LoopConfig

RETENTION_FILE = "retention.jsonl"


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


@dataclass(frozen=True)
class StageWork:
    run: StageRun
    inputs: StageInputs

    @classmethod
    def of(cls, run: StageRun) -> StageWork:
        return cls(run, run.inputs())

    @property
    def scope(self) -> StageScope:
        """Where this stage's tasks record: its catalog rows, its artifact keys, the run's worlds."""
        run = self.run
        return StageScope(run.catalog, run.stage.value, run.stage.folder, self.inputs.worlds, run.faults)

    def engine_settings(self, max_model_len: int, policy: str | None = None) -> EngineSettings:
        """The run's engine backend for a policy with this context: our local engine, the configured URL, or the
        run's vLLM engines serving the base ``policy`` (default: the one de-risk prepared)."""
        config, store = self.run.config, self.run.store
        engine, target = config.engine, cluster_target(config, store)
        backend = ENGINES[config.backends.engine]
        fleet = backend.fleet(
            FleetRequest(config, store, lambda: policy or self.inputs.base_policy(), max_model_len, target)
        )
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

    def tuned_engine(self, max_model_len: int) -> EngineSettings:
        """``engine_settings`` with the systems stage's concurrent sequences."""
        return replace(self.engine_settings(max_model_len), max_num_seqs=int(self.inputs.knobs["max_num_seqs"]))

    def training_setup(self) -> TrainingSetup:
        """The base policy, its harness, the run's task sets and the tuned engine: what a training stage starts from."""
        policy, settings = Path(self.inputs.base_policy()), self.inputs.policy_settings()
        train_tasks, heldout = self.inputs.task_sets(settings)
        engine = self.tuned_engine(settings.harness.context_budget_tokens)
        return TrainingSetup(policy, settings, train_tasks, heldout, engine)

    def runner(self) -> TrainerRunner:
        """Where this run's training loops run (the trainer backend); the stage's manifest keeps its jobs."""
        config = self.run.config
        return TRAINERS[config.backends.trainer].runner(config, cluster_target(config, self.run.store), self.run)

    def retention(self, section: HeroRetention) -> RetentionConfig | None:
        """The PPO-ptx term of this stage's training (None at coef 0): the base's retention set, written where the
        trainer reads it — under the run's shared root, which a cluster's nodes reach too."""
        if section.coef == 0:
            return None
        run = self.run
        out = shared_root(run.config, run.store) / run.stage.folder / RETENTION_FILE
        with run.timed("retention_set"):
            policy = Path(self.inputs.base_policy())
            return retention_set(policy, self.inputs.base_data, out, section, run.config.seed)

    def train(self, label: str, policy: Path, tasks: Sequence[TaskSpec], loop: LoopConfig) -> TrainResult:
        """The ``train`` task for this stage: its catalog, its work folder ``train-<label>``, its progress key, the
        trainer backend's runner, and the run's engines (when it has some) to generate on."""
        return train(self.scope, self.train_job(label, policy, tasks, loop), self.runner())

    def train_job(self, label: str, policy: Path, tasks: Sequence[TaskSpec], loop: LoopConfig) -> TrainJob:
        """``loop`` from ``policy`` over ``tasks`` in its work folder (keyed by what it computes: the engines it runs
        on are not part of it), generating on the run's engines when it has some."""
        run = self.run
        out = run.work_dir(train_folder_stem(label), [str(policy), loop.model_dump(mode="json", exclude={"engines"})])
        settings = self.engine_settings(loop.harness.context_budget_tokens)
        staging = cluster_target(run.config, run.store)
        job_dir = staging.job_dir(run.stage.folder, out) if staging else out
        engines = training_engines(settings, job_dir / "weights")
        current = partial(training_engines, settings, job_dir / "weights") if engines is not None else None
        return TrainJob(label, policy, tasks, loop.model_copy(update={"engines": engines}), out, current)

    def evaluate(self, job: EvalJob, audit_judge: int = 0) -> EvalResult:
        """The ``evaluate`` task for this stage (seed + 1 for every policy: paired evals share sampling seeds), with the
        profile's judge when it names one (its first ``audit_judge`` graded samples audited: ``envs.judge_audit``)."""
        judge = self.run.config.judge
        if judge.url and judge.model:  # tasks with llm_judge criteria are graded by the profile's judge
            spec = JudgeSpec(
                base_url=judge.url, model=judge.model, api_key_env=judge.api_key_env, audit_samples=audit_judge
            )
            job = replace(job, judge=spec)
        out = self.run.work_dir(eval_folder_stem(job.suite, job.label), job.inputs())
        return evaluate(self.scope, job, out, self.run.config.seed + 1)
