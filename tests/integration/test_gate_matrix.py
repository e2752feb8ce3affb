"""The gate matrix: each deliberate defect (``flows.config.Defect``) fails exactly its own stage's gate, with a
finding that names the cause, while every stage before it passes (``make gate-matrix``).

Two profiles. The plumbing defects (de-risk, TITO, systems, ablations) run on the smoke profile, each a smoke run
stopped after the defect's stage. The learning gates (overfit, hero) and transfer need a profile whose bars can fail
and a base with something to lose — smoke's pass any value — so they run on the local profile: one healthy local run
passes all seven gates, then each of these defects resumes a copy of it with the defect, which re-runs the defect's
stage (a defect is an input of its own stage only: ``flows.stage.stage_defects``) and reuses the healthy stages
before it.

The healthy smoke run passing all seven gates is ``test_pipeline``'s resume test; the known-bad tool variants failing
de-risk are ``test_pipeline`` and ``test_derisk``'s.
"""

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from flows.config import Defect, StageName
from flows.pipeline import pipeline
from tasks.run_store import RunStore, StageStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.gate_matrix]


@dataclass(frozen=True)
class Case:
    defect: Defect
    criteria: tuple[str, ...]
    """The criteria that must fail (and be the only ones that do)."""
    subject: str
    """The subject of the finding that names the cause."""
    problem: str
    """Text the finding's problem must contain."""
    overrides: tuple[str, ...] = ()
    """The case's own profile changes: the bar that catches it, where the profile does not set one."""
    profile: str = "smoke"
    """The profile a fresh run of the case uses (its own environment and cached base unless smoke)."""


SMOKE_CASES = [
    Case(Defect.WRONG_ORACLE, ("oracle pass rate",), "ib-1-", "the oracle does not solve its task"),
    # The tool answers after 3 s; the toy tools answer in milliseconds, so a 1-s tool timeout is ample for the rest.
    # A rollout whose cell read timed out earns nothing: no task keeps reward variance either.
    Case(
        Defect.SLOW_TOOL,
        ("worst tool timeout rate", "train tasks with reward variance"),
        "sheets_read_cell",
        "times out",
        ("harness.tool_timeout_s=1",),
    ),
    # The named models' dialect: the local base writes Qwen3-Coder XML after its reasoning (smoke's is too small to
    # write it well), read by a harness set to Hermes JSON. De-risk fails, and the finding names the mismatch rather
    # than a model that cannot call tools. Builds that base when it is not cached (~16 min on 2 cores).
    Case(
        Defect.WRONG_TOOL_FORMAT,
        ("train tasks with reward variance", "base rollouts in another tool-call dialect"),
        "harness.tool_format",
        "writes its tool calls in qwen3_xml, but the harness reads hermes_json",
        profile="local",
    ),
    Case(Defect.RETOKENIZING_HARNESS, ("TITO misalignments",), "harness", "other tokens than crossed the wire"),
    Case(
        Defect.PERTURBED_ENGINE_WEIGHTS,
        ("train-inference mean |Δ logprob|",),
        "engine weights",
        "differ from the trainer",
    ),
    Case(Defect.CRASHING_ARM, ("arms finished",), "dppo_prompt_mean_nudge", "failed: DeliberateCrash"),
    # Smoke reports inert arms without failing (one step of two groups can leave prompt_mean equal to token_mean):
    # this case sets the bar, and enough groups that the healthy arm's aggregation acts.
    Case(
        Defect.IGNORED_ARM_CONFIG,
        ("inert arms",),
        "dppo_prompt_mean_nudge",
        "trained exactly as the baseline did",
        ("stages.ablations.thresholds.max_inert_arms=0", "stages.ablations.prompts_per_step=4"),
    ),
]
LEARNING_CASES = [
    Case(
        Defect.INVERTED_ADVANTAGES,
        ("subset reward gain", "one-sided p (paired over tasks)"),
        "training",
        "the subset reward fell",
    ),
    Case(Defect.SHUFFLED_REWARDS, ("held-out Pass@1 gain, CI low end",), "training", "train reward"),
    Case(
        Defect.DAMAGED_POLICY,
        (
            "code_only: trained − base, CI high end",
            "terminal: trained − base, CI high end",
            "mcq: trained − base, CI high end",
        ),
        "mcq",
        "lost what the base could do",
    ),
]


def assert_fails_its_own_stage(state, folder: Path, case: Case) -> None:
    """The run failed at the defect's stage, on exactly ``case.criteria``, with the finding; every stage before it
    passed."""
    stage = case.defect.stage
    store = RunStore(folder)
    statuses = {m.stage: m.status for m in store.manifests()}
    assert state.name == "GateFailed", state
    assert statuses[stage.value] is StageStatus.GATE_FAILED
    assert all(statuses[earlier.value] is StageStatus.PASSED for earlier in list(StageName)[: stage.index - 1])
    gate = store.manifest(stage.folder).gate
    assert tuple(c["name"] for c in gate["criteria"] if not c["passed"]) == case.criteria, gate["criteria"]
    findings = gate["findings"]
    assert any(f["subject"].startswith(case.subject) and case.problem in f["problem"] for f in findings), findings


@pytest.mark.timeout(2400)  # slow_tool waits out every slow cell read (≈ 5 min); local may build its base
@pytest.mark.parametrize("case", SMOKE_CASES, ids=lambda case: case.defect.value)
def test_a_defect_fails_its_own_stage_and_only_it(prefect_harness, environment_data: Path, tmp_path, case) -> None:
    data = (f"environment.data={environment_data}",) if case.profile == "smoke" else ()
    state = pipeline(
        profile=case.profile,
        overrides=(*data, f"defects=[{case.defect.value}]", *case.overrides),
        stop_after=case.defect.stage.value,
        runs_root=str(tmp_path),
        return_state=True,
    )
    [folder] = [p for p in tmp_path.iterdir() if (p / "run.json").exists()]
    assert_fails_its_own_stage(state, folder, case)


@pytest.fixture(scope="module")
def healthy_local_run(prefect_harness, tmp_path_factory) -> Path:
    """The local profile end to end, every gate passing: the learning defects' healthy twin (~40 min on 2 cores).

    ``RL_RECIPE_HEALTHY_RUN`` names one already made (``make demo``'s run folder) instead: it is only read — each
    case resumes a copy — and must have passed all seven gates, as the run made here must."""
    if given := os.environ.get("RL_RECIPE_HEALTHY_RUN"):
        folder = Path(given).resolve()
        assert (folder / "run.json").is_file(), f"RL_RECIPE_HEALTHY_RUN={given} is not a run folder"
        profile = json.loads((folder / "run.json").read_text())["profile"]
        assert profile == "local", f"RL_RECIPE_HEALTHY_RUN={given} ran the {profile} profile, not local"
    else:
        runs_root = tmp_path_factory.mktemp("healthy")
        state = pipeline(profile="local", runs_root=str(runs_root), return_state=True)
        assert state.is_completed(), state
        [folder] = [p for p in runs_root.iterdir() if (p / "run.json").exists()]
    statuses = {m.stage: m.status for m in RunStore(folder).manifests()}
    assert len(statuses) == len(StageName) and set(statuses.values()) == {StageStatus.PASSED}, statuses
    return folder


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("case", LEARNING_CASES, ids=lambda case: case.defect.value)
def test_a_learning_defect_fails_its_own_gate_where_the_healthy_run_passed(
    healthy_local_run: Path, tmp_path, case
) -> None:
    copy = tmp_path / healthy_local_run.name
    # The run without the defect's stage and those after it: their work folders name the healthy run's paths (the
    # evals' task files), and those stages run again anyway.
    later = {stage.folder for stage in list(StageName)[case.defect.stage.index - 1 :]}
    shutil.copytree(healthy_local_run, copy, ignore=lambda folder, names: later & set(names))
    state = pipeline(
        profile=None,
        resume=copy.name,
        overrides=(f"defects=[{case.defect.value}]",),
        stop_after=case.defect.stage.value,
        runs_root=str(tmp_path),
        return_state=True,
    )
    assert_fails_its_own_stage(state, copy, case)
    healthy, defective = RunStore(healthy_local_run), RunStore(copy)
    for earlier in list(StageName)[: case.defect.stage.index - 1]:  # reused, not run again
        assert defective.manifest(earlier.folder) == healthy.manifest(earlier.folder)
