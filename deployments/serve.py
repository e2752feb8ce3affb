"""The deployments of rl-recipe, served from one process (``recipe serve``).

* ``pipeline`` — the seven gated stages; its form in the UI: profile, run to resume, typed changes (steps, bars,
  learning rate, engine URL), any other override, the stage to stop after;
* one deployment per stage (``derisk`` … ``transfer``) — that stage on an existing run (``run``: its id or folder);
* ``nightly-overfit-gate`` — the overfit gate of the latest landed config against the current code, on the profile's
  cron (``schedule.nightly_cron`` in ``schedule.timezone``, default 02:00 UTC); a failure alerts the profile's webhook.

``recipe serve`` also creates the global concurrency limit ``gpu`` when it is missing. The same deployments for a
process work pool are in ``deployments/prefect.yaml`` (``prefect deploy --all`` + ``prefect worker start``).

    recipe serve --profile local          # needs a Prefect API: `recipe server` in another shell
"""

from __future__ import annotations

from prefect import serve
from prefect.client.schemas.schedules import CronSchedule
from prefect.deployments.runner import RunnerDeployment

from flows.config import load_profile
from flows.nightly import nightly_overfit
from flows.pipeline import STAGE_FLOWS, pipeline
from tasks.concurrency import ensure_gpu_limit

TAGS = ["rl-recipe"]


def deployments(profile: str = "local", cron: str | None = None, timezone: str | None = None) -> list[RunnerDeployment]:
    """Every deployment, defaults set to ``profile``; the nightly gate on ``cron`` (default: the profile's)."""
    schedule = load_profile(profile).schedule
    nightly = CronSchedule(cron=cron or schedule.nightly_cron, timezone=timezone or schedule.timezone)
    built = [
        pipeline.to_deployment(
            name="pipeline",
            parameters={"profile": profile},
            description="The recipe's seven gated stages end to end (or resumed); stops at the first failed gate.",
            tags=TAGS,
        ),
        nightly_overfit.to_deployment(
            name="nightly-overfit-gate",
            parameters={"profile": profile},
            schedules=[nightly],
            description="Nightly: the overfit gate of the latest landed config against the current code.",
            tags=[*TAGS, "nightly"],
        ),
    ]
    built += [
        stage_flow.to_deployment(
            name=stage.value,
            description=f"Stage {stage.index} ({stage.value}) on an existing run: give its run id or folder.",
            tags=[*TAGS, "stage"],
        )
        for stage, stage_flow in STAGE_FLOWS.items()
    ]
    return built


def serve_all(profile: str = "local", cron: str | None = None, timezone: str | None = None) -> None:
    """Serve every deployment from this process until interrupted (runs keep going when it stops: no pause)."""
    ensure_gpu_limit()
    serve(*deployments(profile, cron, timezone), pause_on_shutdown=False)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="recipe serve", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="local", help="the profile the deployments default to")
    parser.add_argument("--nightly-cron", help="cron of the nightly overfit gate (default: the profile's, 0 2 * * *)")
    parser.add_argument("--timezone", help="time zone of the cron (default: the profile's, UTC)")
    args = parser.parse_args(argv)
    serve_all(args.profile, args.nightly_cron, args.timezone)


if __name__ == "__main__":
    main()
