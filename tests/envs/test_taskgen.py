"""Task generators: counts per domain/tier/split, held-out worlds, ids, oracles that derive their answers."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from envs.check import check_task
from envs.taskgen import generate_tasks, split_of
from envs.types import AnswerNumeric, FileUnchanged, Split, TaskSpec, Tier
from envs.worlds import WorldFacts, generate_worlds, is_heldout_world

TIER_MINIMUM_PER_WORLD = {Tier.TOY: 15, Tier.STANDARD: 8, Tier.DELIVERABLE: 6}
FILE_CRITERIA = {"file_exists", "docx_contains", "pptx_contains", "xlsx_cell_equals"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, WorldFacts], list[TaskSpec]]:
    root = tmp_path_factory.mktemp("worlds")
    facts = generate_worlds(root)
    return root, facts, generate_tasks(facts)


def test_counts_per_domain_tier_and_split(built: tuple[Path, dict[str, WorldFacts], list[TaskSpec]]) -> None:
    _, facts, tasks = built
    assert len(tasks) >= 240
    per_world_tier = Counter((task.world_id, task.tier) for task in tasks)
    for world_id in facts:
        for tier, minimum in TIER_MINIMUM_PER_WORLD.items():
            assert per_world_tier[(world_id, tier)] >= minimum, (world_id, tier)
    per_domain_split = Counter((task.domain, task.split) for task in tasks)
    assert all(per_domain_split[(domain, split)] > 0 for domain in {t.domain for t in tasks} for split in Split)


def test_heldout_worlds_never_train(built: tuple[Path, dict[str, WorldFacts], list[TaskSpec]]) -> None:
    _, _, tasks = built
    for task in tasks:
        if is_heldout_world(task.world_id):
            assert task.split == Split.HELDOUT, task.task_id
    train_world_tasks = [task for task in tasks if not is_heldout_world(task.world_id)]
    share = sum(task.split == Split.HELDOUT for task in train_world_tasks) / len(train_world_tasks)
    assert 0.05 < share < 0.3  # ~15 % by hash


def test_split_is_a_pure_function_of_the_task_id() -> None:
    assert split_of("ib-1-toy-0001", "ib-1") == split_of("ib-1-toy-0001", "ib-1")
    assert split_of("ib-3-toy-0001", "ib-3") == Split.HELDOUT
    assert {split_of(f"mc-1-toy-{n:04d}", "mc-1") for n in range(1, 60)} == set(Split)


def test_ids_are_unique_and_well_formed(built: tuple[Path, dict[str, WorldFacts], list[TaskSpec]]) -> None:
    _, _, tasks = built
    ids = [task.task_id for task in tasks]
    assert len(ids) == len(set(ids))
    for task in tasks:
        assert re.fullmatch(rf"{task.world_id}-{task.tier}-\d{{4}}", task.task_id)


def test_generation_is_deterministic(built: tuple[Path, dict[str, WorldFacts], list[TaskSpec]]) -> None:
    _, facts, tasks = built
    assert [task.model_dump() for task in generate_tasks(facts)] == [task.model_dump() for task in tasks]


def test_oracles_answer_from_tool_outputs(built: tuple[Path, dict[str, WorldFacts], list[TaskSpec]]) -> None:
    _, _, tasks = built
    for task in tasks:
        assert task.oracle is not None and task.oracle.steps, task.task_id
        answer = task.oracle.answer or ""
        assert "${" in answer, task.task_id
        for criterion in task.rubric:
            if isinstance(criterion, AnswerNumeric):
                assert f"{criterion.expected:g}" not in re.sub(r"\$\{\w+\}", "", answer), task.task_id


def test_toy_tasks_are_one_or_two_calls(built: tuple[Path, dict[str, WorldFacts], list[TaskSpec]]) -> None:
    _, _, tasks = built
    for task in tasks:
        if task.tier == Tier.TOY:
            assert task.oracle is not None and 1 <= len(task.oracle.steps) <= 2, task.task_id
            assert task.oracle.steps[0].tool in {"sheets.read_cell", "sheets.read_formula", "filesystem.read_file"}


def test_input_files_exist_and_deliverables_guard_a_file(
    built: tuple[Path, dict[str, WorldFacts], list[TaskSpec]],
) -> None:
    root, _, tasks = built
    for task in tasks:
        for path in task.input_files:
            assert (root / task.world_id / "filesystem" / path).is_file(), (task.task_id, path)
        if task.tier == Tier.DELIVERABLE:
            kinds = {criterion.kind for criterion in task.rubric}
            assert kinds & FILE_CRITERIA, task.task_id
            (unchanged,) = [c for c in task.rubric if isinstance(c, FileUnchanged)]
            assert (root / task.world_id / "filesystem" / unchanged.path).is_file()


def test_one_oracle_per_domain_and_tier_reaches_full_reward(
    built: tuple[Path, dict[str, WorldFacts], list[TaskSpec]],
) -> None:
    root, _, tasks = built
    sample = {(task.domain, task.tier): task for task in reversed(tasks)}  # the first task of each pair
    assert len(sample) == 9
    for task in sample.values():
        result = check_task(task, root)
        assert result.passed, (task.task_id, result.error)
