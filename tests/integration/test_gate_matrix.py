"""The gate matrix: each deliberate defect (``flows.config.Defect``) fails exactly its own stage's gate, with a
finding that names the cause, while every stage before it passes (``make gate-matrix``; the smoke profile).

The healthy smoke run passing all seven gates is ``test_pipeline``'s resume test; the known-bad tool variants failing
de-risk are ``test_pipeline`` and ``test_derisk``'s. Each case here is a smoke run stopped after the defect's stage.
"""

from dataclasses import dataclass
from pathlib import Path

import pytest

from flows.config import Defect
from flows.pipeline import pipeline
from tasks.run_store import RunStore, StageStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.gate_matrix]


@dataclass(frozen=True)
class Case:
    defect: Defect
    criterion: str
    """The criterion that must fail (and be the only one that does)."""
    subject: str
    """The subject of the finding that names the cause."""
    problem: str
    """Text the finding's problem must contain."""


CASES = [
    Case(Defect.WRONG_ORACLE, "oracle pass rate", "ib-1-", "the oracle does not solve its task"),
    Case(Defect.RETOKENIZING_HARNESS, "TITO misalignments", "harness", "other tokens than crossed the wire"),
    Case(
        Defect.PERTURBED_ENGINE_WEIGHTS, "train-inference mean |Δ logprob|", "engine weights", "differ from the trainer"
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.defect.value)
def test_a_defect_fails_its_own_stage_and_only_it(prefect_harness, environment_data: Path, tmp_path, case) -> None:
    stage = case.defect.stage
    state = pipeline(
        profile="smoke",
        overrides=(f"environment.data={environment_data}", f"defects=[{case.defect.value}]"),
        stop_after=stage.value,
        runs_root=str(tmp_path),
        return_state=True,
    )
    [folder] = [p for p in tmp_path.iterdir() if (p / "run.json").exists()]
    store = RunStore(folder)
    statuses = {m.stage: m.status for m in store.manifests()}
    assert state.name == "GateFailed"
    assert statuses[stage.value] is StageStatus.GATE_FAILED
    assert all(statuses[earlier.value] is StageStatus.PASSED for earlier in list(type(stage))[: stage.index - 1])
    gate = store.manifest(stage.folder).gate
    assert [c["name"] for c in gate["criteria"] if not c["passed"]] == [case.criterion], gate["criteria"]
    assert any(f["subject"].startswith(case.subject) and case.problem in f["problem"] for f in gate["findings"]), gate[
        "findings"
    ]
