"""The trace explorer in a real browser (Debian's chromium driven by Playwright): ``recipe view`` serving the sample
run, then the same page as a static export opened from ``file://``. The page loads, a filter narrows the list, a
trajectory shows its turns, tool calls and grades, base vs trained sit side by side, the de-risk numbers click
through, the curves draw — with no console error, and trace text (a hostile error message) stays text.

Screenshots land in the test's output folder (``RL_RECIPE_SCREENSHOTS`` to keep them somewhere else).

    .venv/bin/python -m pytest -m browser tests/integration/test_explorer_browser.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from envs.net import free_port
from tasks.explorer.queries import Explorer, Page, TrajectoryFilter
from tasks.explorer.sample import INVENTED_TOOL, build_sample_run
from tasks.run_store import RunStore

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync", "--disable-quic"]  # fmt: skip
START_TIMEOUT_S = 60.0
TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("explorer") / "runs"
    build_sample_run(root)
    build_sample_run(root, "sample-b", seed=1)  # a second run beside it, to compare with
    return root


@pytest.fixture(scope="module")
def served(runs_root) -> Iterator[str]:
    """``recipe view sample`` as its own process, until the module's tests are done."""
    port = free_port()
    log = (runs_root.parent / "view.log").open("w")
    command = [sys.executable, "-m", "cli", "view", "sample", "--runs-root", str(runs_root), "--port", str(port)]
    process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(url + "api/run", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, (runs_root.parent / "view.log").read_text()
            assert time.monotonic() < deadline, "recipe view did not answer"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("RL_RECIPE_SCREENSHOTS", tmp_path / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser_page():
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        yield page, errors
        browser.close()


def count_text(page) -> str:
    return page.locator(".list-count").first.inner_text()


def shown(runs_root: Path, **filters: str) -> str:
    """The list's count line for these filters, from the query layer (what the page must show)."""
    total = Explorer(RunStore.open(runs_root, "sample")).trajectories(TrajectoryFilter(**filters), Page())["total"]
    return f"1–{total} of {total} trajectories" if total else "no trajectory matches"


def check_chart_legends(page, runs_root: Path) -> None:
    """One card of charts per stage with train steps, in the run's order; in every chart each series has a legend
    entry, by name, and a colour no other series of that chart has."""
    explorer = Explorer(RunStore.open(runs_root, "sample"))
    trained = {s["stage"] for s in explorer.curves()["steps"]}
    stages = [m.stage for m in explorer.manifests() if m.stage in trained]
    assert stages == ["overfit", "ablations", "hero"]
    assert page.locator("[data-curves]").evaluate_all("cards => cards.map(c => c.dataset.curves)") == stages
    charts = page.locator("div.chart")
    assert charts.count() == 2 * len(stages)
    for i in range(charts.count()):
        chart = charts.nth(i)
        drawn = chart.locator("g[data-series]").evaluate_all("gs => gs.map(g => g.dataset.series)")
        named = chart.locator(".chart-legend li").evaluate_all(
            "lis => lis.map(li => [li.dataset.series, li.textContent])"
        )
        colours = chart.locator(".chart-legend li").evaluate_all("lis => lis.map(li => li.dataset.color)")
        assert drawn and [name for name, _ in named] == drawn and [text for _, text in named] == drawn
        assert len(set(colours)) == len(colours), colours
        assert chart.locator(".chart-legend").is_visible()
    arms = page.locator("[data-curves=ablations] div.chart").first.locator(".chart-legend li")
    assert {t.split()[0] for t in arms.all_inner_texts()} == {"baseline", "dppo", "dppo_prompt_mean_nudge"}


def test_served_page_filters_opens_a_trajectory_compares_and_clicks_through(
    runs_root, served, browser_page, shots
) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)  # a loaded 2-core runner renders slower than the 5 s default

    page, errors = browser_page
    page.goto(served)
    expect(page.locator(".stage[data-stage=derisk]")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator(".stage[data-stage=transfer] .badge.gate_failed")).to_be_visible()
    expect(page.get_by_text("slides_add_slide", exact=True).first).to_be_visible()  # a de-risk finding
    page.screenshot(path=shots / "1-stages.png", full_page=True)

    page.get_by_role("link", name="Trajectories", exact=True).click()
    expect(page.locator(".list-count").first).to_have_text(shown(runs_root), timeout=TIMEOUT_MS)
    page.select_option("select[name=tool]", "code_exec_run_python")
    expect(page.locator(".list-count").first).to_have_text(shown(runs_root, tool="code_exec_run_python"))
    page.select_option("select[name=call_error]", "ModuleNotFoundError")
    narrowed = shown(runs_root, tool="code_exec_run_python", call_error="ModuleNotFoundError")
    expect(page.locator(".list-count").first).to_have_text(narrowed)
    assert narrowed != shown(runs_root, tool="code_exec_run_python") != shown(runs_root)  # each filter narrowed it
    assert page.locator("table.list tbody tr").count() == int(narrowed.split()[-2])
    page.screenshot(path=shots / "2-list-filtered.png", full_page=True)

    page.locator("table.list tbody tr").first.click()
    expect(page.locator(".trajectory .turn").first).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator(".trajectory .piece.gen").first).to_contain_text("<tool_call>")
    expect(page.locator(".trajectory .turn .piece.obs").first).to_contain_text("ModuleNotFoundError")
    expect(page.locator("table.grades")).to_contain_text("answer_numeric")
    expect(page.locator("table.calls").first).to_contain_text("code_exec_run_python")
    page.screenshot(path=shots / "3-trajectory.png", full_page=True)

    # The context nudge fired in the overfit stage's last step.
    page.goto(served + "#/trajectories?stage=overfit&sort=id&order=desc")
    page.locator("table.list tbody tr").first.click()
    expect(page.locator(".badge.nudge").first).to_contain_text("context nudge", timeout=TIMEOUT_MS)

    # Base vs trained on one held-out task.
    page.goto(served + "#/compare?task_id=ib-3-ebitda")
    expect(page.locator(".compare-side")).to_have_count(2, timeout=TIMEOUT_MS)
    sides = page.locator(".compare-side > h3")
    expect(sides.nth(0)).to_contain_text("base")
    expect(sides.nth(1)).to_contain_text("trained")
    page.screenshot(path=shots / "4-compare.png", full_page=True)

    # De-risk: the failures of a tool link to the trajectories behind them.
    page.get_by_role("link", name="De-risk", exact=True).click()
    expect(page.locator("table.tools")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("table.signatures")).to_contain_text("preinstall", timeout=TIMEOUT_MS)
    page.screenshot(path=shots / "5-derisk.png", full_page=True)
    page.select_option("select[name=stage]", "all")
    expect(page).to_have_url(re.compile(r"#/tools\?stage=all$"))
    expect(page.locator("table.tools")).to_contain_text("filesystem_read_file", timeout=TIMEOUT_MS)
    row = page.locator("table.tools tbody tr").filter(has_text="code_exec_run_python")
    failures = int(row.locator("td").nth(3).inner_text())
    row.locator("td").nth(3).get_by_role("link").click()
    expect(page.locator("select[name=call]")).to_have_value("failed", timeout=TIMEOUT_MS)
    assert 0 < int(count_text(page).split(" of ")[1].split()[0]) <= failures

    # An invented tool name is one "unknown tool" row below the real tools, never a tool of its own.
    page.goto(served + "#/tools?stage=derisk")
    expect(page.locator("table.unknown-tools")).to_contain_text(INVENTED_TOOL, timeout=TIMEOUT_MS)
    expect(page.locator("table.unknown-tools")).to_contain_text("unknown tool")
    assert INVENTED_TOOL not in page.locator("table.tools").inner_text()
    signature_tools = page.locator("table.signatures tbody td:nth-child(2)").all_inner_texts()
    assert "unknown tool" in signature_tools and INVENTED_TOOL not in signature_tools  # its error text may name it
    page.screenshot(path=shots / "5b-derisk-unknown-tool.png", full_page=True)

    page.get_by_role("link", name="Curves & tables", exact=True).click()
    expect(page.locator("svg.chart polyline").first).to_be_attached(timeout=TIMEOUT_MS)
    check_chart_legends(page, runs_root)
    expect(page.locator("[data-table=ablations-arms]")).to_contain_text("dppo_prompt_mean_nudge")
    expect(page.locator("[data-table=transfer-suites]")).to_contain_text("worse")
    page.screenshot(path=shots / "6-curves.png", full_page=True)

    page.goto(served + "#/trajectories?tool=sheets_read_cell&call=failed")
    page.locator("table.list tbody tr").first.click()
    expect(page.locator("table.calls").first).to_contain_text("DROP TABLE", timeout=TIMEOUT_MS)
    assert page.title() != "pwned" and page.locator("main img").count() == 0  # the hostile error stayed text
    assert not errors, errors


def test_served_page_compares_the_run_with_another_beside_it(served, browser_page, shots) -> None:
    from playwright.sync_api import expect

    page, errors = browser_page
    page.goto(served + "#/runs")
    page.select_option("select[name=with]", "sample-b")
    expect(page.locator("[data-compare=sample-vs-sample-b]")).to_be_visible(timeout=TIMEOUT_MS)
    gates = page.locator("[data-table=Gates] table")
    expect(gates).to_contain_text("oracle pass rate")
    assert gates.locator("th").all_inner_texts()[:4] == ["stage", "criterion", "A measured", "A needs"]
    legend = page.locator("div.chart").first.locator(".chart-legend li").all_inner_texts()
    assert {name.split(" · ")[0] for name in legend} == {"A", "B"}, legend
    page.screenshot(path=str(shots / "explorer-compare-runs.png"), full_page=True)
    assert not errors, errors


def test_static_export_opens_from_file(runs_root, tmp_path, browser_page, shots) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)

    out = tmp_path / "static"
    done = subprocess.run(
        [sys.executable, "-m", "cli", "view", "sample", "--runs-root", str(runs_root), "--static", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    page, errors = browser_page
    page.goto((out / "index.html").as_uri() + "#/trajectories")
    expect(page.locator(".list-count").first).to_have_text(shown(runs_root), timeout=TIMEOUT_MS)
    # The page's JS filter in a static export matches the query layer's SQL on the same run.
    page.select_option("select[name=tool]", "code_exec_run_python")
    page.select_option("select[name=call_error]", "ModuleNotFoundError")
    expect(page.locator(".list-count").first).to_have_text(
        shown(runs_root, tool="code_exec_run_python", call_error="ModuleNotFoundError")
    )
    page.fill("input[name=reward_max]", "0.5")
    page.press("input[name=reward_max]", "Enter")
    expect(page.locator(".list-count").first).to_have_text(
        shown(runs_root, tool="code_exec_run_python", call_error="ModuleNotFoundError", reward_max=0.5)
    )
    page.locator("table.list tbody tr").first.click()
    expect(page.locator(".trajectory .turn").first).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("table.grades")).to_contain_text("answer_numeric")
    page.screenshot(path=shots / "7-static-trajectory.png", full_page=True)

    # A sample of the run: the filters count what the folder holds, next to the run's count.
    small = tmp_path / "static-small"
    done = subprocess.run(
        [sys.executable, "-m", "cli", "view", "sample", "--runs-root", str(runs_root), "--static", str(small),
         "--limit", "12"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    page.goto((small / "index.html").as_uri() + "#/trajectories")
    expect(page.locator(".list-count").first).to_have_text("1–12 of 12 trajectories", timeout=TIMEOUT_MS)
    expect(page.locator("p.note")).to_contain_text("12 of the run's 36 trajectories")
    options = page.locator("select[name=stage] option").all_inner_texts()[1:]
    held = {o.split(" (")[0]: o.split(" (")[1].rstrip(")") for o in options}
    assert set(held) == {"derisk", "overfit", "hero"} and all(" of " in n for n in held.values()), held
    assert sum(int(n.split(" of ")[0]) for n in held.values()) == 12
    page.select_option("select[name=stage]", "hero")
    expect(page.locator(".list-count").first).to_have_text(
        f"1–{held['hero'].split()[0]} of {held['hero'].split()[0]} trajectories"
    )
    assert not errors, errors


NARROW = {"width": 1280, "height": 800}
VIEWS = {
    "stages": "#/stages",
    "trajectories": "#/trajectories",
    "trajectory": "#/trajectories?tool=sheets_read_cell&call=failed",  # then its first row
    "compare": "#/compare?task_id=ib-3-ebitda",
    "tools": "#/tools?stage=all",
    "curves": "#/curves",
    "runs": "#/runs?with=sample-b",
}
OVERFLOW = """() => {
  const page = document.documentElement.scrollWidth - window.innerWidth;
  const boxes = [...document.querySelectorAll('.card, .chart, .side > div')]
    .filter(box => box.scrollWidth > box.clientWidth + 1)
    .map(box => (box.dataset.table || box.dataset.curves || box.className)
      + ' by ' + (box.scrollWidth - box.clientWidth));
  return {page, boxes};
}"""


def test_no_view_is_wider_than_a_1280_px_window(served, browser_page, shots) -> None:
    """Every view of the explorer at 1,280 × 800: nothing scrolls sideways, neither the page nor a card, chart or side
    of a comparison (a newcomer's 1,400-px window showed "Compare runs" at 2,447 px and "Curves & tables" at 2,169)."""
    from playwright.sync_api import expect

    page, errors = browser_page
    page.set_viewport_size(NARROW)
    wide = {}
    for name, hash_ in VIEWS.items():
        page.goto(served + hash_)
        expect(page.locator("main > *").first).to_be_visible(timeout=TIMEOUT_MS)
        page.wait_for_load_state("networkidle")
        if name == "trajectory":
            page.locator("table.list tbody tr").first.click()
            expect(page.locator(".trajectory .turn").first).to_be_visible(timeout=TIMEOUT_MS)
        if name == "curves":
            expect(page.locator("svg.chart polyline").first).to_be_attached(timeout=TIMEOUT_MS)
        if name == "runs":
            expect(page.locator("[data-compare=sample-vs-sample-b]")).to_be_visible(timeout=TIMEOUT_MS)
        page.screenshot(path=shots / f"narrow-{name}.png", full_page=True)
        found = page.evaluate(OVERFLOW)
        if found["page"] > 0 or found["boxes"]:
            wide[name] = found
    assert not wide, wide
    assert not errors, errors
