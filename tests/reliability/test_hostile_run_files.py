"""Hostile run folders and implausible profiles (red-team findings 10 and 11).

A run folder is read back by ``recipe audit | report | view | run --resume``: a damaged ``run.json`` or manifest (nested
200 000 levels deep, a 5000-digit integer), a stray ``manifest.json`` outside a stage folder or a run name no folder
can have ends in one line ``recipe: error: ...`` and exit 2, naming the file; a gate finding missing a key is shown
with what it holds. A profile value no run could use (NaN, a 2**64 seed, a million workers, a ``file://`` webhook, a
time zone that is a path) fails at load with its field path.

``recipe run --resume`` is called with the pipeline flow replaced: a check that let a damaged run through would
start Prefect, so the stand-in fails the test instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from cli.main import USAGE_ERROR, main
from flows.config import ProfileError, RunChanges, load_profile
from tasks.run_store import RunStore, RunStoreError, StageManifest, StageStatus

DEEP = "[" * 200_000 + "]" * 200_000  # past the JSON parser's recursion limit
HUGE_INT = '{"n": ' + "9" * 5000 + "}"  # past Python's 4300-digit int conversion limit
LONG_NAME = "a" * 5000
RUN = "r"


def _no_pipeline(**_: object) -> None:
    raise AssertionError("the pipeline flow started on a run folder that should have been refused")


@pytest.fixture
def runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``runs/r``: a smoke run with one passed de-risk stage (its gate holds one finding)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("flows.pipeline.pipeline", _no_pipeline)
    config = load_profile("smoke")
    store = RunStore.create(tmp_path / "runs", "smoke", config.model_dump(mode="json"), config.digest(), run_id=RUN)
    finding = {"subject": "fs_read", "problem": "fails", "advice": "fix it"}
    gate = {"stage": "derisk", "passed": True, "criteria": [], "findings": [finding]}
    store.write_manifest(StageManifest(stage="derisk", folder="1-derisk", status=StageStatus.PASSED, gate=gate))
    return tmp_path / "runs"


def _commands(run: str, runs_root: Path) -> list[list[str]]:
    root = ["--runs-root", str(runs_root)]
    return [
        ["audit", run, *root],
        ["report", run, *root],
        ["view", run, *root, "--static", str(runs_root.parent / "static")],
        ["run", "--resume", run, *root],
    ]


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refused command printed (asserting exit 2, one line, no traceback)."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert (code, len(lines)) == (USAGE_ERROR, 1), (argv[:2], err[-2000:])
    assert lines[0].startswith("recipe: error: ") and len(lines[0]) < 500, lines[0][:600]
    return lines[0]


@pytest.mark.parametrize("command", range(4), ids=["audit", "report", "view", "run-resume"])
@pytest.mark.parametrize("file", ["run.json", "1-derisk/manifest.json"])
@pytest.mark.parametrize(("text", "reason"), [(DEEP, "nested deeper"), (HUGE_INT, "digits")], ids=["deep", "huge"])
def test_a_hostile_run_file_is_one_line_naming_it(
    runs_root: Path, capsys, command: int, file: str, text: str, reason: str
) -> None:
    (runs_root / RUN / file).write_text(text)
    line = _refused(_commands(RUN, runs_root)[command], capsys)
    assert file in line and reason in line


@pytest.mark.parametrize("command", range(4), ids=["audit", "report", "view", "run-resume"])
def test_a_stray_manifest_outside_a_stage_folder_is_one_line_naming_it(runs_root: Path, capsys, command: int) -> None:
    stray = runs_root / RUN / "notes" / "manifest.json"
    stray.parent.mkdir()
    stray.write_text((runs_root / RUN / "1-derisk" / "manifest.json").read_text())
    assert "notes/manifest.json" in _refused(_commands(RUN, runs_root)[command], capsys)


@pytest.mark.parametrize("command", range(4), ids=["audit", "report", "view", "run-resume"])
def test_a_run_name_no_folder_can_have_is_one_line(runs_root: Path, capsys, command: int) -> None:
    assert "is not a run id" in _refused(_commands(LONG_NAME, runs_root)[command], capsys)


def test_a_gate_finding_missing_a_key_is_shown_with_what_it_holds(runs_root: Path, capsys) -> None:
    store = RunStore.open(runs_root, RUN)
    manifest = store.manifest("1-derisk")
    findings = [{"subject": "fs_read", "advice": "return a confirmation", "rate": 0.5}, "a finding as bare text"]
    store.write_manifest(manifest.model_copy(update={"gate": {**manifest.gate, "findings": findings}}))
    assert main(["audit", RUN, "--runs-root", str(runs_root)]) == 0
    out = capsys.readouterr().out
    assert "fs_read" in out and "return a confirmation" in out and "a finding as bare text" in out
    assert main(["report", RUN, "--runs-root", str(runs_root)]) == 0
    report = (runs_root / RUN / "report.md").read_text()
    assert "return a confirmation" in report and "a finding as bare text" in report


@pytest.mark.parametrize("run_id", [LONG_NAME, "a" * 129, "../escape", "a/b", ".hidden", "two words"])
def test_a_run_id_that_is_no_plain_folder_name_is_refused(tmp_path: Path, run_id: str) -> None:
    with pytest.raises(RunStoreError, match="is not a run id"):
        RunStore.create(tmp_path / "runs", "smoke", {}, "h", run_id=run_id)
    assert not (tmp_path / "escape").exists() and not (tmp_path / "runs" / "a").exists()


def test_a_generated_run_id_is_checked_too(tmp_path: Path) -> None:
    with pytest.raises(RunStoreError, match="is not a run id"):
        RunStore.create(tmp_path / "runs", "a/b", {}, "h")  # the profile's name starts a generated id


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        ("smoke", "smoke-2b46b378b586"),
        ("/tmp/x/smoke-browser.yaml", "smoke-browser-2b46b378b586"),
        ("../my profile.yml", "my-profile-2b46b378b586"),
    ],
)
def test_a_ui_run_of_a_profile_given_as_a_path_gets_a_plain_run_id(monkeypatch, profile: str, expected: str) -> None:
    """A run started from the UI with a YAML path as its profile was refused: the path went into its run id."""
    from flows import pipeline

    monkeypatch.setattr(pipeline.flow_run, "get_id", lambda: "01a2333b-41ec-7f52-891f-2b46b378b586")
    assert pipeline._default_run_id(profile) == expected


def test_runs_created_together_get_their_own_run_ids(monkeypatch) -> None:
    """Prefect's scheduler gives the runs it creates UUIDv7 ids, whose first 8 hex digits are the time in 16 s steps:
    the runs of a scheduled pipeline deployment, created in one batch, got one run id, and each resumed the first's
    folder (its stages "passed before with the same inputs": nothing ran)."""
    from prefect._internal.uuid7 import uuid7

    from flows import pipeline

    started = 1_764_600_000_000  # two flow runs created 0.9 s apart, as the scheduler ids them
    first, second = str(uuid7(ms=started)), str(uuid7(ms=started + 900))
    assert first[:8] == second[:8]  # what the run id was made of
    ids = []
    for flow_run_id in (first, second):
        monkeypatch.setattr(pipeline.flow_run, "get_id", lambda flow_run_id=flow_run_id: flow_run_id)
        ids.append(pipeline._default_run_id("smoke"))
    assert ids[0] != ids[1]
    monkeypatch.setattr(pipeline.flow_run, "get_id", lambda: first)
    assert pipeline._default_run_id("smoke") == ids[0]  # a retry (the same flow run) finds its folder again


# --- finding 11: implausible profile values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("stages.overfit.thresholds.min_reward_gain=.nan", "stages.overfit.thresholds.min_reward_gain"),
        ("stages.hero.thresholds.min_ci_low=.inf", "stages.hero.thresholds.min_ci_low"),
        ("stages.systems.thresholds.max_logprob_mismatch=.inf", "stages.systems.thresholds.max_logprob_mismatch"),
        ("engine.timeout_s=1e400", "engine.timeout_s"),
        ("seed=18446744073709551616", "seed"),
        ("seed=-1", "seed"),
        ("environment.seed=9223372036854775808", "environment.seed"),
        ("rollout.workers=1000000", "rollout.workers"),
        ("rollout.max_concurrency=1000000", "rollout.max_concurrency"),
        ("environment.worlds_per_domain=1000000", "environment.worlds_per_domain"),
        ("stages.overfit.steps=10000001", "stages.overfit.steps"),
        ("stages.systems.sweep.workers=[0]", "stages.systems.sweep.workers.0"),
        ("alerts.webhook_url=file:///etc/passwd", "alerts.webhook_url"),
        ("alerts.webhook_url=http://", "alerts.webhook_url"),
        ("schedule.timezone=../../etc/passwd", "schedule.timezone"),
        ("schedule.timezone=/etc/passwd", "schedule.timezone"),
        ("schedule.timezone=Mars/Olympus_Mons", "schedule.timezone"),
        ("schedule.timezone=" + "a" * 5000, "schedule.timezone"),
        ("profile=../x", "profile"),
    ],
)
def test_an_implausible_profile_value_is_refused_with_its_field(override: str, field: str) -> None:
    with pytest.raises(ProfileError, match=rf"{re.escape(field)}: "):
        load_profile("smoke", [override])


def test_plausible_extremes_still_validate() -> None:
    config = load_profile(
        "qwen35-397b",
        [
            f"seed={2**63 - 1}",
            "rollout.workers=65536",
            "environment.worlds_per_domain=1000",
            "alerts.webhook_url=https://hooks.example.com/T1/B2",
            "schedule.timezone=America/Argentina/Buenos_Aires",
            "stages.hero.steps=1000000",
        ],
    )
    assert config.schedule.timezone == "America/Argentina/Buenos_Aires" and config.rollout.workers == 65536


@pytest.mark.parametrize(
    "change", [{"overfit_min_reward_gain": float("nan")}, {"learning_rate": float("inf")}, {"hero_steps": 10**7}]
)
def test_the_run_form_refuses_what_the_profile_refuses(change: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        RunChanges(**change)
