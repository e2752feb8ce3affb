"""`deployments/prefect.yaml` against a real Prefect server: `prefect deploy --all` registers the same deployments
`recipe serve` serves, on the process work pool, with the nightly cron (its own server: deploying upserts the
served deployments of the same names)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PREFECT = str(Path(sys.executable).parent / "prefect")
STAGES = ("derisk", "tito", "systems", "overfit", "ablations", "hero", "transfer")


def prefect(env: dict[str, str], repo: Path, *args: str) -> str:
    done = subprocess.run(
        [PREFECT, "--no-prompt", *args], env=env, cwd=repo, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_prefect_yaml_deploys_every_deployment_to_the_process_pool(prefect_server, ops) -> None:
    prefect(prefect_server, ops.repo, "work-pool", "create", "rl-recipe", "--type", "process")
    prefect(prefect_server, ops.repo, "deploy", "--all", "--prefect-file", "deployments/prefect.yaml")
    deployments = {d["name"]: d for d in ops.api(prefect_server, "POST", "/deployments/filter", json={})}
    assert set(deployments) == {"pipeline", "nightly-overfit-gate", *STAGES}
    assert {d["work_pool_name"] for d in deployments.values()} == {"rl-recipe"}
    assert deployments["pipeline"]["parameters"] == {"profile": "local"}
    assert "RunChanges" in deployments["pipeline"]["parameter_openapi_schema"]["definitions"]  # the same typed form
    [schedule] = deployments["nightly-overfit-gate"]["schedules"]
    assert schedule["schedule"]["cron"] == "0 2 * * *"
    assert deployments["overfit"]["entrypoint"] == "flows/overfit.py:overfit"
