"""The recipe as one gated pipeline: de-risk → TITO → systems → overfit → ablations → hero → transfer.

``pipeline`` opens (or resumes) a run folder, then calls the stage flows in order with ``return_state=True``. A stage
that already passed with the same inputs (``flows.stage.is_current``: its fingerprint) is reused, not run again; the
first stage that does not pass ends the pipeline — as ``Failed(name="GateFailed")`` when its gate did not hold, or
as the stage's own failure — and the stages after it are recorded as ``skipped``.

Resume: ``recipe run --resume RUN`` (or ``pipeline(resume=RUN)``) runs the same folder again, with the run's stored
config, or with a changed one (``--profile``/``--set``: the change is recorded in ``run.json``). A retry of a failed
pipeline flow run from the Prefect UI resumes too: without ``resume``, the run id is derived from the flow run's id,
which a retry keeps.

    recipe run --profile local                      # make demo
    recipe run --resume local-20261130-1402-ab12 --set stages.overfit.thresholds.min_reward_gain=0.05
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from prefect import flow
from prefect.runtime import flow_run
from prefect.states import Failed, State

from flows.ablations import ablations
from flows.config import RecipeConfig, RunChanges, StageName, apply_overrides, load_profile, validate_config
from flows.derisk import derisk
from flows.hero import hero
from flows.overfit import overfit
from flows.placement import ENGINES, cluster_target
from flows.preflight import preflight
from flows.stage import DEFAULT_RUNS_ROOT, is_current
from flows.systems import systems
from flows.tito import tito
from flows.transfer import transfer
from tasks.artifacts import log, publish_table
from tasks.concurrency import ensure_gpu_limit
from tasks.run_lock import claim, release
from tasks.run_store import RunStore, StageManifest, StageStatus, now

StageChoice = Literal[tuple(stage.value for stage in StageName)]  # type: ignore[valid-type]
"""A stage by name, as a Literal: the UI's form lists an enum's values only when they are inline, not behind a $ref."""

STAGE_FLOWS = {
    StageName.DERISK: derisk,
    StageName.TITO: tito,
    StageName.SYSTEMS: systems,
    StageName.OVERFIT: overfit,
    StageName.ABLATIONS: ablations,
    StageName.HERO: hero,
    StageName.TRANSFER: transfer,
}


def open_pipeline_run(
    profile: str | None, resume: str | None, overrides: list[str], runs_root: Path, run_id: str | None = None
) -> tuple[RunStore, RecipeConfig]:
    """A new run folder for ``profile``, or the run ``resume`` (or ``run_id``, when it exists) with any config
    change recorded, claimed by this process (``tasks.run_lock``: another process working on it is refused in one
    line; ``release`` it when done). The config is validated before anything is written."""
    if resume is None and run_id is not None and RunStore.exists(runs_root, run_id):
        resume = run_id
    if resume is not None:
        store = RunStore.open(runs_root, resume)
        claim(store.root, "recipe run --resume")
        stored = store.info().config
        if profile is not None:
            config = load_profile(profile, overrides)
            reason = f"resumed with profile {profile}" + (f" and {overrides}" if overrides else "")
        else:
            config = validate_config(apply_overrides(stored, overrides), f"{store.root}/run.json with {overrides}")
            reason = f"resumed with {overrides}"
        store.update_config(config.model_dump(mode="json"), config.digest(), reason)
        return store, config
    config = load_profile(profile or "local", overrides)
    store = RunStore.create(runs_root, config.profile, config.model_dump(mode="json"), config.digest(), run_id)
    claim(store.root, "recipe run")
    return store, config


def _skip(store: RunStore, stages: list[StageName], reason: str) -> None:
    for stage in stages:
        store.write_manifest(
            StageManifest(
                stage=stage.value, folder=stage.folder, status=StageStatus.SKIPPED, finished_at=now(), error=reason
            )
        )


RUN_ID_SUFFIX = 12
"""Hex digits of the flow run id in a deployment run's id: its last ones, random in a UUIDv4 (a run from the UI's Run
button) and in a UUIDv7 (48 bits; the ids Prefect's scheduler gives the runs it creates). A UUIDv7's first 8 are its
creation time in steps of 16 s: the runs a schedule created together once got one run id, and each resumed the first's
folder."""


def _default_run_id(profile: str | None) -> str | None:
    """``<profile>-<the flow run id's last 12 hex digits>``: a retry of the same flow run finds (and resumes) the same
    folder, and runs started together get their own. A profile given as a YAML path is named by its file
    (``smoke-browser.yaml`` → ``smoke-browser``), as a run id must be a plain folder name."""
    run_id = flow_run.get_id()
    if not run_id:
        return None
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(profile or "local").name.removesuffix(".yaml").removesuffix(".yml"))
    return f"{name.lstrip('.-_')[:64] or 'profile'}-{run_id.replace('-', '')[-RUN_ID_SUFFIX:]}"


@flow(name="pipeline", log_prints=True)
def pipeline(
    profile: str | None = "local",
    resume: str | None = None,
    changes: RunChanges = RunChanges(),  # noqa: B008 (a frozen default: the UI shows its fields as the form)
    overrides: tuple[str, ...] = (),
    stop_after: StageChoice = StageName.TRANSFER.value,
    runs_root: str = str(DEFAULT_RUNS_ROOT),
) -> dict[str, Any] | State:
    """The seven gated stages in order; stops at the first that does not pass (see the module docstring).

    Args:
        profile: A profile in deployments/profiles (smoke, local, local-hermes, ablations, cluster-cpu, qwen36-35b,
            qwen35-397b) or a YAML path. With resume, only given to replace the run's stored config.
        resume: A run id (or folder) to run again: stages that passed with the same inputs are reused.
        changes: Typed changes to the profile for this run (steps, bars, learning rate, engine URL).
        overrides: Any other change, KEY=VALUE with a dotted path, e.g. stages.overfit.subset_size=8.
        stop_after: The last stage to run (default: transfer, the seventh).
        runs_root: The folder of run folders.
    """
    settings = [*changes.overrides(), *overrides]
    store, config = open_pipeline_run(
        profile, resume, settings, Path(runs_root), None if resume else _default_run_id(profile)
    )
    root = str(store.root)
    log("run %s (%s) in %s", store.run_id, config.profile, root)
    try:
        preflight(config)
        ensure_gpu_limit()
        try:
            return _run_stages(store, config, runs_root, stop_after)
        finally:
            ENGINES[config.backends.engine].stop(config, store, cluster_target(config, store))  # the run's fleet
    finally:
        release(store.root)


def _run_stages(store: RunStore, config: RecipeConfig, runs_root: str, stop_after: str) -> dict[str, Any] | State:
    root = str(store.root)
    outcome: dict[str, str] = {}
    stages = list(StageName)
    for position, stage in enumerate(stages):
        if is_current(store, config, stage):
            outcome[stage.value] = "reused"
            log("%s: passed before with the same inputs; reused", stage.folder)
        else:
            state = STAGE_FLOWS[stage](run=root, runs_root=runs_root, return_state=True)
            outcome[stage.value] = state.name or str(state.type)
            if not state.is_completed():
                _skip(store, stages[position + 1 :], f"stage {stage.value} did not pass")
                publish_table("0-pipeline", "stages", _rows(store), f"run {store.run_id}")
                name = "GateFailed" if state.name == "GateFailed" else "Failed"
                return Failed(name=name, message=f"run {store.run_id}: stage {stage.value}: {state.message}")
        if stage == stop_after:
            break
    publish_table("0-pipeline", "stages", _rows(store), f"run {store.run_id}")
    return {"run_id": store.run_id, "run": root, "stages": outcome}


def _rows(store: RunStore) -> list[dict[str, Any]]:
    return [
        {"stage": m.folder, "status": m.status.value, "duration_s": m.duration_s, "attempt": m.attempt}
        for m in store.manifests()
    ]
