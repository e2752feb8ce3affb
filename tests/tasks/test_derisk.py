"""De-risk analysis: per-tool rates from the catalog by hand, and every known-bad variant caught with its finding."""

from pathlib import Path

import pytest

from envs.build import build_environment, load_tasks
from envs.check import OracleTransport
from envs.mcp.variants import BadVariant
from envs.types import ToolCallRecord
from flows.config import DeriskThresholds
from flows.stage_gates import DeriskMeasured, derisk_gate
from tasks.catalog import Catalog, tool_call_row
from tasks.context import StageScope
from tasks.derisk import check_environment_task, rollout_errors, tool_stats


def call(tool: str, ok: bool = True, empty: bool = False, signature: str | None = None, turn: int = 0):
    return ToolCallRecord(turn=turn, tool=tool, ok=ok, returned_empty=empty, error_class=signature)


def test_tool_stats_by_hand(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.duckdb")
    rows = [
        # task a: read then write; its oracle failed → blamed on write (its last call)
        tool_call_row("s", "oracle", "a", "w", call("read", turn=0)),
        tool_call_row("s", "oracle", "a", "w", call("write", empty=True, turn=1)),
        # task b: read only, solved
        tool_call_row("s", "oracle", "b", "w", call("read")),
        tool_call_row("s", "probe", None, "w", call("run", ok=False, signature="ModuleNotFoundError")),
        tool_call_row("s", "probe", None, "w", call("run")),
        # the model's calls: failures here are not the tool's
        tool_call_row("s", "base-rollouts", "a", "w", call("read", ok=False, signature="ToolError")),
        tool_call_row("s", "base-rollouts", "a", "w", call("read")),
    ]
    catalog.append("tool_calls", rows)
    catalog.append(
        "oracle", [{"stage": "s", "task_id": "a", "passed": False}, {"stage": "s", "task_id": "b", "passed": True}]
    )
    stats = {s.tool: s for s in tool_stats(catalog, "s")}
    assert stats["read"].calls == 4 and stats["read"].failure_rate == 0.0 and stats["read"].model_failure_rate == 0.5
    assert stats["read"].oracle_pass_rate == 1.0  # task a's failure is blamed on write, its last call
    assert stats["write"].empty_rate == 1.0 and stats["write"].oracle_pass_rate == 0.0
    assert stats["run"].failure_rate == 0.5 and stats["run"].top_signature == "ModuleNotFoundError"
    assert stats["run"].oracle_pass_rate is None and stats["run"].empty_rate == 0.0


def test_infra_rate_counts_clean_rollouts_in_its_denominator(tmp_path: Path) -> None:
    """8 clean rollouts (no error class), 1 model error, 1 infra error: the infra share is 1/10, not 1/2 —
    the cluster demo's gate once read 7 infra errors of 824 rollouts as 0.096."""
    catalog = Catalog(tmp_path / "c.duckdb")
    classes = [None] * 8 + ["model", "retryable_infra"]
    rows = [
        {
            "id": i,
            "stage": "s",
            "source": "base-rollouts",
            "task_id": f"t{i}",
            "reward": 1.0 if i < 4 else 0.0,
            "passed": i < 4,
            "error_class": error_class,
        }
        for i, error_class in enumerate(classes)
    ]
    catalog.append("trajectories", rows)
    errors = rollout_errors(catalog, "s")
    assert errors["rollouts"] == 10 and errors["infra_errors"] == 1 and errors["model_errors"] == 1
    assert errors["infra_rate"] == pytest.approx(0.1) and errors["pass_rate"] == pytest.approx(0.4)


@pytest.fixture(scope="module")
def ib1(tmp_path_factory):
    data = tmp_path_factory.mktemp("derisk") / "data"
    build_environment(data)
    return data, [t for t in load_tasks(data) if t.world_id == "ib-1"]


@pytest.mark.parametrize(
    ("variant", "tool", "words"),
    [
        (BadVariant.SLIDES_RETURNS_NONE, "slides_add_slide", ("returns nothing", "confirmation")),
        (BadVariant.PDF_FLATTEN, "pdf_read_pdf", ("oracles that call it", "column")),
        (BadVariant.CODE_EXEC_NO_PACKAGES, "code_exec_run_python", ("ModuleNotFoundError", "preinstall")),
    ],
)
def test_every_known_bad_variant_fails_the_gate_naming_tool_rate_and_fix(ib1, tmp_path, variant, tool, words) -> None:
    data, tasks = ib1
    catalog = Catalog(tmp_path / "c.duckdb")
    scope = StageScope(catalog, "derisk", "1-derisk", data / "worlds")
    checked = check_environment_task.fn(scope, tasks, OracleTransport.INMEMORY, [variant])
    stats = tool_stats(catalog, "derisk")
    measured = DeriskMeasured(checked["solved"], checked["tasks"], 10, 0.0, stats, tasks_with_variance=16)
    report = derisk_gate(measured, DeriskThresholds(), subset_size=16)
    assert not report.passed
    [finding] = [f for f in report.findings if f.subject == tool]
    assert finding.rate is not None  # the failure, empty or oracle pass rate behind it
    text = f"{finding.problem} → {finding.advice}"
    assert all(word in text for word in words), text
    assert {f.subject for f in report.findings} == {tool}  # the sound tools are not blamed


def test_the_sound_environment_passes(ib1, tmp_path) -> None:
    data, tasks = ib1
    catalog = Catalog(tmp_path / "c.duckdb")
    scope = StageScope(catalog, "derisk", "1-derisk", data / "worlds")
    checked = check_environment_task.fn(scope, tasks, OracleTransport.INMEMORY, [])
    measured = DeriskMeasured(checked["solved"], checked["tasks"], 10, 0.0, tool_stats(catalog, "derisk"), 16)
    report = derisk_gate(measured, DeriskThresholds(), subset_size=16)
    assert report.passed and not report.findings and checked["probes"] == 6
