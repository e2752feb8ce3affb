"""The Prefect UI in a real browser (Debian's chromium driven by Playwright): start a smoke run from the pipeline
deployment's form, wait for it, and read its gate-report artifact; and `recipe server` on a port of its own, started
with no Prefect address in its environment, shows its own API's runs (not "Oops", the page of a UI that calls port
4200). Screenshots land in the test's output folder (``RL_RECIPE_SCREENSHOTS`` to keep them somewhere else). Run with
``make test-browser``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from envs.build import build_environment
from envs.net import free_port
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
SERVER_START_TIMEOUT_S = 180.0
ADDRESS_SETTINGS = ("PREFECT_API_URL", "PREFECT_UI_API_URL", "PREFECT_SERVER_UI_API_URL")


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


def _healthy(base: str) -> bool:
    """Whether the server at ``base`` answers its health route yet (a refused connection means: still starting)."""
    try:
        return httpx.get(f"{base}/api/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def lone_server(tmp_path, ops) -> Iterator[str]:
    """`recipe server --port N` as a newcomer starts it: no Prefect address in its environment, so only the command
    can tell the UI which port its API is on. Yields the server's address."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ADDRESS_SETTINGS} | {"PREFECT_HOME": str(tmp_path)}
    command = [sys.executable, "-m", "cli", "server", "--port", str(port)]
    with (tmp_path / "server.log").open("w") as log:
        process = subprocess.Popen(command, env=env, cwd=ops.repo, stdout=log, stderr=log)
        try:
            ops.wait_for(lambda: _healthy(base), SERVER_START_TIMEOUT_S, f"recipe server --port {port}")
            yield base
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


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
        # each criterion's detail is a line under the table (a fifth column ran past the UI's pane and was cut off)
        expect(page.get_by_text(re.compile(r"^oracle pass rate: \d+/\d+$")).first).to_be_visible()
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


def test_the_ui_on_its_own_port_shows_its_own_apis_runs(lone_server, ops, shots) -> None:
    from playwright.sync_api import expect, sync_playwright

    api = {"PREFECT_API_URL": f"{lone_server}/api"}
    flow = ops.api(api, "POST", "/flows/", json={"name": "port-check"})
    run = ops.api(api, "POST", "/flow_runs/", json={"flow_id": flow["id"], "name": "run-on-its-own-port"})
    api_calls: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("request", lambda r: api_calls.append(r.url) if "/api/" in r.url else None)
        for ui, path in (("v1", "/runs"), ("v2", "/v2/runs")):  # Prefect 3.9 serves both; "/" opens v2
            page.goto(f"{lone_server}{path}")
            expect(page.get_by_text(run["name"]).first).to_be_visible(timeout=30_000)
            expect(page.get_by_text("Oops")).to_have_count(0)
            page.screenshot(path=shots / f"own-port-{ui}-runs.png", full_page=True)
        browser.close()
    assert api_calls and all(url.startswith(f"{lone_server}/api/") for url in api_calls), sorted(set(api_calls))
