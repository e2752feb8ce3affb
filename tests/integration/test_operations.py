"""Operating the pipeline from Prefect, against a real server process: `recipe server` + `recipe serve`.

The deployments register with typed forms and the nightly cron; `prefect deployment run` of the nightly overfit gate
(smoke profile) completes; a forced gate failure fails the nightly run and posts the alert to a local receiver; the
retry the UI makes (the flow run set back to Scheduled / AwaitingRetry) re-runs a failed pipeline run in the same run
folder without re-running the stages that passed; every stage's artifacts are on the server under their keys.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envs.build import build_environment
from envs.net import serve_in_thread
from tasks.run_store import RunStore, StageStatus

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 600.0
PREFECT = str(Path(sys.executable).parent / "prefect")
STAGES = ("derisk", "tito", "systems", "overfit", "ablations", "hero", "transfer")


@pytest.fixture(scope="module")
def served(prefect_server, ops, tmp_path_factory) -> Iterator[dict[str, str]]:
    with ops.serve(prefect_server, "smoke", tmp_path_factory.mktemp("serve") / "serve.log"):
        yield prefect_server


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ops") / "data"
    build_environment(folder)
    return folder


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local webhook: records every JSON body POSTed to /hook."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    received: list[dict[str, Any]] = []

    async def hook(request: Request) -> JSONResponse:
        received.append(await request.json())
        return JSONResponse({"ok": True})

    with serve_in_thread(Starlette(routes=[Route("/hook", hook, methods=["POST"])])) as url:
        yield f"{url}/hook", received


def deployment_run(ops, env: dict[str, str], name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """`prefect deployment run NAME --params ... --watch`, then the flow run as the API reports it."""
    done = subprocess.run(
        [PREFECT, "deployment", "run", name, "--params", json.dumps(parameters), "--watch"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    marker = "UUID: "
    [flow_run_id] = [line.split(marker)[1].strip() for line in done.stdout.splitlines() if marker in line][:1]
    return ops.api(env, "GET", f"/flow_runs/{flow_run_id}")


def wait_terminal(ops, env: dict[str, str], flow_run_id: str, after: str | None = None) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        run = ops.api(env, "GET", f"/flow_runs/{flow_run_id}")
        terminal = run["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
        return run if terminal and run["state"]["id"] != after else None

    return ops.wait_for(finished, RUN_TIMEOUT_S, f"flow run {flow_run_id}", every_s=2.0)


def test_serve_registers_the_deployments_with_typed_forms_and_the_nightly_cron(served, ops) -> None:
    deployments = {d["name"]: d for d in ops.api(served, "POST", "/deployments/filter", json={})}
    assert {"pipeline", "nightly-overfit-gate", *STAGES} <= set(deployments)
    form = deployments["pipeline"]["parameter_openapi_schema"]
    assert deployments["pipeline"]["parameters"] == {"profile": "smoke"}  # the form opens on the served profile
    assert "resume" in form["properties"] and "a run id" in form["properties"]["resume"]["description"].lower()
    changes = form["definitions"]["RunChanges"]["properties"]
    assert {"overfit_steps", "hero_steps", "learning_rate", "engine_url"} <= set(changes)
    assert "Optimizer steps of the overfit gate" in changes["overfit_steps"]["description"]
    [schedule] = deployments["nightly-overfit-gate"]["schedules"]
    assert schedule["schedule"]["cron"] == "0 2 * * *" and schedule["schedule"]["timezone"] == "UTC"
    [limit] = [g for g in ops.api(served, "POST", "/v2/concurrency_limits/filter", json={}) if g["name"] == "gpu"]
    assert limit["limit"] == 1


@pytest.mark.timeout(RUN_TIMEOUT_S * 2)  # two overfit runs; the first may bootstrap the smoke base
def test_the_nightly_gate_runs_and_a_forced_failure_alerts(served, ops, data, receiver, tmp_path) -> None:
    url, received = receiver
    base = [f"environment.data={data}"]
    passed = deployment_run(
        ops, served, "nightly-overfit-gate/nightly-overfit-gate", {"overrides": base, "runs_root": str(tmp_path)}
    )
    assert passed["state"]["type"] == "COMPLETED", passed["state"]
    assert not received
    # A tool that broke overnight (a known-bad variant): the de-risk gate fails, the nightly run with it.
    failing = [*base, "sandbox.variants=[slides_returns_none]", f"alerts.webhook_url={url}"]
    failed = deployment_run(
        ops, served, "nightly-overfit-gate/nightly-overfit-gate", {"overrides": failing, "runs_root": str(tmp_path)}
    )
    assert failed["state"]["type"] == "FAILED"
    ops.wait_for(lambda: received, 30, "the alert")
    [alert] = received
    assert alert["flow_run_id"] == failed["id"] and "stage derisk" in alert["message"]
    assert "empty-on-success" in alert["message"]
    assert "nightly-overfit-gate failed (smoke)" in alert["text"]


@pytest.mark.timeout(RUN_TIMEOUT_S * 2)
def test_a_ui_retry_reuses_the_stages_that_passed(served, ops, data, tmp_path) -> None:
    parameters = {
        "overrides": [f"environment.data={data}", "stages.tito.thresholds.min_multi_call_rollouts=1000"],
        "stop_after": "tito",
        "runs_root": str(tmp_path),
    }
    first = deployment_run(ops, served, "pipeline/pipeline", parameters)
    assert first["state"]["type"] == "FAILED" and first["state"]["name"] == "GateFailed"
    [folder] = [p.parent for p in tmp_path.glob("*/run.json")]
    before = {m.folder: m for m in RunStore(folder).manifests()}
    assert [m.status for m in before.values()][:2] == [StageStatus.PASSED, StageStatus.GATE_FAILED]
    # What the UI's Retry button sends: the failed run back to Scheduled, named AwaitingRetry.
    ops.api(
        served,
        "POST",
        f"/flow_runs/{first['id']}/set_state",
        json={"state": {"type": "SCHEDULED", "name": "AwaitingRetry"}, "force": True},
    )
    again = wait_terminal(ops, served, first["id"], after=first["state"]["id"])
    assert again["run_count"] == 2 and again["state"]["name"] == "GateFailed"
    after = {m.folder: m for m in RunStore(folder).manifests()}
    assert after["1-derisk"] == before["1-derisk"]  # reused, not re-run: the manifest is untouched
    assert after["2-tito"].attempt == before["2-tito"].attempt + 1
    artifacts = [a for a in ops.api(served, "POST", "/artifacts/filter", json={}) if folder.name in str(a["data"])]
    assert {"stage-1-derisk-gate", "stage-1-derisk-plots", "stage-2-tito-gate"} <= {a["key"] for a in artifacts}


def test_prefect_yaml_deploys_every_deployment_to_the_process_pool(served, ops) -> None:
    """Last in this module: deploying upserts the served deployments of the same names onto the pool."""
    prefect(served, ops.repo, "work-pool", "create", "rl-recipe", "--type", "process")
    prefect(served, ops.repo, "deploy", "--all", "--prefect-file", "deployments/prefect.yaml")
    deployments = {d["name"]: d for d in ops.api(served, "POST", "/deployments/filter", json={})}
    assert set(deployments) == {"pipeline", "nightly-overfit-gate", *STAGES}
    assert {d["work_pool_name"] for d in deployments.values()} == {"rl-recipe"}
    assert deployments["pipeline"]["parameters"] == {"profile": "local"}
    assert "RunChanges" in deployments["pipeline"]["parameter_openapi_schema"]["definitions"]  # the same typed form
    [schedule] = deployments["nightly-overfit-gate"]["schedules"]
    assert schedule["schedule"]["cron"] == "0 2 * * *"
    assert deployments["overfit"]["entrypoint"] == "flows/overfit.py:overfit"


def prefect(env: dict[str, str], repo: Path, *args: str) -> str:
    done = subprocess.run(
        [PREFECT, "--no-prompt", *args], env=env, cwd=repo, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
