"""The nightly overfit gate: the latest landed config's overfit stage, against the current code.

The landed config is the profile with the landed arm of its newest run whose ablations passed (its algorithm changes
and context nudge; the profile as it is when no run landed one yet). A new run of it goes through the pipeline up to
the overfit stage — de-risk, TITO and systems included, since the code may have changed since — and the flow ends
in the pipeline's state: a failed gate is a failed nightly run, and the profile's ``alerts.webhook_url`` gets a POST
naming the run, the stage and the failed criteria, and the overfit gate's last pass and first failure since, each
with its commit (``tasks.history``; ``recipe history --profile P`` prints the whole table).

    recipe serve    # schedules it (profile's schedule.nightly_cron, in schedule.timezone)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow
from prefect.client.schemas.objects import Flow, FlowRun
from prefect.states import Failed, State

from flows.config import StageName, load_profile
from flows.pipeline import pipeline
from flows.stage import DEFAULT_RUNS_ROOT
from tasks.alerts import post_alert
from tasks.artifacts import log
from tasks.history import failure_streak, overfit_history
from tasks.run_store import StageStatus, runs_of


def landed_overrides(runs_root: Path, profile: str) -> list[str]:
    """The config changes of the newest landed arm of ``profile`` (none when no run has landed one)."""
    for store in reversed(runs_of(runs_root, profile)):
        manifest = store.manifest(StageName.ABLATIONS.folder)
        if manifest is None or manifest.status is not StageStatus.PASSED:
            continue
        landed = manifest.outputs["landed"]
        log("landed config: arm %s of run %s", landed["arm"], store.run_id)
        changes = [f"trainer.algorithm.{key}={value}" for key, value in landed["algorithm"].items()]
        return [*changes, f"harness.context_nudge={str(landed['context_nudge']).lower()}"]
    log("no run of %s has landed an arm yet: the profile's own config", profile)
    return []


def alert_on_failure(flow: Flow, flow_run: FlowRun, state: State) -> None:
    """Flow-run hook: post the failure to the profile's webhook (nothing when it has none), with the overfit gate's
    last pass and first failure since, each at its commit (``tasks.history``): where to start bisecting."""
    profile = flow_run.parameters.get("profile", "local")
    config = load_profile(profile, list(flow_run.parameters.get("overrides") or ()))
    alerts = config.alerts
    if not alerts.webhook_url:
        return
    runs_root = Path(flow_run.parameters.get("runs_root") or DEFAULT_RUNS_ROOT)
    streak = failure_streak(overfit_history(runs_root, config.profile))
    payload: dict[str, Any] = {
        "text": "\n".join([f"rl-recipe: {flow.name} failed ({profile}): {state.message}", *streak.lines()]),
        "flow_run": flow_run.name,
        "flow_run_id": str(flow_run.id),
        "state": state.name,
        "message": state.message,
        "profile": profile,
        **streak.as_json(),
    }
    post_alert(alerts.webhook_url, payload, alerts.timeout_s)


@flow(name="nightly-overfit-gate", log_prints=True, on_failure=[alert_on_failure])
def nightly_overfit(
    profile: str = "local", overrides: tuple[str, ...] = (), runs_root: str = str(DEFAULT_RUNS_ROOT)
) -> dict[str, Any] | State:
    """The overfit gate of the latest landed config against the current code; alerts the profile's webhook when it
    fails.

    Args:
        profile: The profile whose landed config is checked (deployments/profiles/<name>.yaml).
        overrides: Changes to the profile, KEY=VALUE (e.g. alerts.webhook_url=https://...), after the landed arm's.
        runs_root: The folder of run folders, where the landed arm is looked up and the new run is written.
    """
    changes = (*landed_overrides(Path(runs_root), profile), *overrides)
    state = pipeline(
        profile=profile, overrides=changes, stop_after=StageName.OVERFIT.value, runs_root=runs_root, return_state=True
    )
    if not state.is_completed():
        return Failed(name=state.name or "Failed", message=state.message)
    return state.result()
