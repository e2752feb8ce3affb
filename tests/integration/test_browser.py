"""The Prefect UI in a real browser (Debian's chromium driven by Playwright): start a smoke run from the pipeline
deployment's form, wait for it, and read its gate-report artifact. Screenshots land in the test's output folder
(``RL_RECIPE_SCREENSHOTS`` to keep them somewhere else). Run with ``make test-browser``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from envs.build import build_environment
from flows.config import PROFILES_DIR

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
RUN_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def smoke_profile(tmp_path_factory, ops) -> Path:
    """The smoke profile with absolute paths: the served process's working folder is the checkout."""
    root = tmp_path_factory.mktemp("browser")
    build_environment(root / "data")
    raw = yaml.safe_load((PROFILES_DIR / "smoke.yaml").read_text())
    raw["environment"]["data"] = str(root / "data")
    raw["runs_root"] = str(root / "runs")
    raw["policy"]["cache"] = str(ops.repo / "models" / "base")
    path = root / "smoke-browser.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def ui(prefect_server, ops, smoke_profile) -> Iterator[dict[str, str]]:
    with ops.serve(prefect_server, str(smoke_profile), smoke_profile.parent / "serve.log"):
        yield prefect_server


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("RL_RECIPE_SCREENSHOTS", tmp_path / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_start_a_run_from_the_form_and_read_its_gate_report(ui, ops, shots, smoke_profile) -> None:
    from playwright.sync_api import expect, sync_playwright

    base = ui["PREFECT_API_URL"].removesuffix("/api")
    [pipeline] = [d for d in ops.api(ui, "POST", "/deployments/filter", json={}) if d["name"] == "pipeline"]
    console_errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
        failed_requests: list[str] = []
        page.on(
            "response",
            lambda r: failed_requests.append(f"{r.status} {r.request.method} {r.url}") if r.status >= 400 else None,
        )

        page.goto(f"{base}/deployments")
        expect(page.get_by_text("nightly-overfit-gate").first).to_be_visible(timeout=30_000)
        page.get_by_role("link", name="pipeline", exact=True).first.click()
        expect(page.get_by_role("button", name="Run", exact=True)).to_be_visible(timeout=30_000)
        page.screenshot(path=shots / "1-deployment.png")

        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_text("Custom run").click()
        expect(page.get_by_text("stop_after").first).to_be_visible(timeout=30_000)
        expect(page.locator("textarea").first).to_have_value(str(smoke_profile))  # the served profile
        # The form shows the typed changes with their descriptions, and the profile it was served with.
        expect(page.get_by_text("Typed changes to the profile for this run")).to_be_visible()
        stop_after = page.locator(".schema-form-property").filter(has_text="The last stage to run")
        stop_after.locator(".p-select-button__control").focus()
        page.keyboard.press("ArrowDown")  # opens the select's list (a headless click toggles it open and shut)
        page.get_by_role("option", name="derisk").click()
        page.screenshot(path=shots / "2-form.png", full_page=True)
        page.get_by_role("button", name="Submit").click()

        # The UI goes back to the deployment's Runs tab, where the new run is listed.
        page.wait_for_url(re.compile(r".*/deployments/deployment/.*tab=Runs"), timeout=30_000)
        runs = {"deployments": {"id": {"any_": [pipeline["id"]]}}}
        [started] = ops.wait_for(
            lambda: ops.api(ui, "POST", "/flow_runs/filter", json=runs), 30, "the run started from the form"
        )
        flow_run_id = started["id"]
        run = ops.wait_for(
            lambda: (
                (r := ops.api(ui, "GET", f"/flow_runs/{flow_run_id}"))["state"]["type"] in ("COMPLETED", "FAILED") and r
            ),
            RUN_TIMEOUT_S,
            "the smoke run started from the form",
            every_s=3.0,
        )
        assert run["deployment_id"] == pipeline["id"] and run["state"]["type"] == "COMPLETED", run["state"]
        assert run["parameters"]["stop_after"] == "derisk"
        page.goto(f"{base}/runs/flow-run/{flow_run_id}")
        expect(page.get_by_text("Completed").first).to_be_visible(timeout=30_000)
        page.screenshot(path=shots / "3-flow-run.png", full_page=True)

        [gate] = [a for a in ops.api(ui, "POST", "/artifacts/filter", json={}) if a["key"] == "stage-1-derisk-gate"]
        page.goto(f"{base}/artifacts/artifact/{gate['id']}")
        expect(page.get_by_text("Stage 1 · derisk — gate PASSED").first).to_be_visible(timeout=30_000)
        expect(page.get_by_text("oracle pass rate").first).to_be_visible()
        page.screenshot(path=shots / "4-gate-report.png", full_page=True)

        [plots] = [a for a in ops.api(ui, "POST", "/artifacts/filter", json={}) if a["key"] == "stage-1-derisk-plots"]
        page.goto(f"{base}/artifacts/artifact/{plots['id']}")
        image = page.locator("img[alt='tool failure rates']").first
        expect(image).to_be_visible(timeout=30_000)
        assert page.evaluate("(img) => img.naturalWidth", image.element_handle()) > 100  # the PNG really rendered
        page.screenshot(path=shots / "5-plots.png", full_page=True)
        browser.close()
    # The UI asks for /ico/undefined.svg (the icon of a served deployment's absent work-pool type): Prefect's, not ours.
    assert not [r for r in failed_requests if "/ico/" not in r], failed_requests
    assert not [e for e in console_errors if not e.startswith("Failed to load resource")], console_errors
