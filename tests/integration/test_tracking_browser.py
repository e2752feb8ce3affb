"""The MLflow UI in a real browser (Debian's chromium driven by Playwright) on a live server ``recipe tracking up``
started: the sample run published with ``recipe tracking publish``, then the run's page shows its gate metrics, the
hero's reward curve and the hero's trajectory table with base and trained side by side. Screenshots land in the
test's folder (``RL_RECIPE_SCREENSHOTS`` to keep them somewhere else).

    .venv/bin/python -m pytest -m browser tests/integration/test_tracking_browser.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envs.net import free_port
from tasks.explorer.sample import build_sample_run
from tasks.tracking.state import links
from tests.integration.test_explorer_browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]


def recipe(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_mlflow_ui_shows_the_run_its_curve_and_its_trajectory_table(tmp_path: Path) -> None:
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    runs, server = tmp_path / "runs", tmp_path / "mlflow"
    build_sample_run(runs)
    port = free_port()
    up = recipe("tracking", "up", "--port", str(port), "--root", str(server))
    url = f"http://127.0.0.1:{port}"
    assert url in up.stdout
    shots = Path(os.environ.get("RL_RECIPE_SCREENSHOTS", tmp_path))
    try:
        recipe("tracking", "publish", "sample", "--runs-root", str(runs), "--backend", "mlflow", "--mlflow-uri", url)
        link = links(runs / "sample")["mlflow"]
        assert link.startswith(f"{url}/#/experiments/")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(link)
            page.get_by_text("derisk/gate/oracle_pass_rate", exact=True).wait_for()  # the run, with its gate
            page.goto(f"{link}/model-metrics")
            page.get_by_placeholder("Search metric charts").fill("hero/train")
            page.get_by_text("hero/train/hero-dppo_prompt_mean_nudge", exact=False).first.wait_for()
            chart = page.get_by_text("reward_mean", exact=True)
            chart.wait_for()
            page.screenshot(path=str(shots / "mlflow-curves.png"))
            page.goto(f"{link}/artifacts")
            page.get_by_text("tables", exact=True).click()
            page.get_by_text("hero", exact=True).click()
            page.get_by_text("trajectories.json", exact=True).click()
            page.get_by_text("View as table").wait_for()
            page.get_by_text("trained", exact=True).first.wait_for()  # a cell of the table, not the file's text
            shown = page.inner_text("body")
            assert "eval/heldout" in shown and "\nbase\n" in shown and "ib-3-ebitda" in shown
            page.screenshot(path=str(shots / "mlflow-table.png"))
            browser.close()
    finally:
        recipe("tracking", "down", "--root", str(server))
