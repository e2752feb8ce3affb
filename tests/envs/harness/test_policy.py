"""A policy's harness.json: round trip, what training stores off, and malformed files named with file and field."""

import pytest

from envs.errors import RecipeError
from envs.harness.agent import HarnessConfig
from envs.harness.chat import ToolListing
from envs.harness.policy import HARNESS_FILE, PolicyHarness, read_policy_harness, write_policy_harness

TRAINED = HarnessConfig(
    tool_listing=ToolListing.SIGNATURES,
    system_prompt="Use the tools.",
    max_turns=4,
    max_tokens_per_turn=96,
    context_budget_tokens=1024,
    context_nudge=True,
    seed=5,
)


def test_round_trip_and_absent_file(tmp_path):
    assert read_policy_harness(tmp_path) is None
    settings = PolicyHarness(apps=("filesystem", "sheets"), harness=TRAINED)
    path = write_policy_harness(tmp_path, settings)
    assert path == tmp_path / HARNESS_FILE and [p.name for p in tmp_path.iterdir()] == [HARNESS_FILE]  # no temp file
    assert read_policy_harness(tmp_path) == settings
    every_app = PolicyHarness(harness=HarnessConfig())
    write_policy_harness(tmp_path, every_app)
    assert read_policy_harness(tmp_path) == every_app and read_policy_harness(tmp_path).apps is None


def test_training_stores_the_run_level_knobs_off():
    stored = PolicyHarness.from_training(TRAINED, ["filesystem"])
    assert stored.apps == ("filesystem",)
    assert (stored.harness.context_nudge, stored.harness.seed) == (False, None)  # evals run without the nudge
    assert stored.harness.model_dump(exclude={"context_nudge", "seed"}) == TRAINED.model_dump(
        exclude={"context_nudge", "seed"}
    )
    assert PolicyHarness.from_training(TRAINED, None).apps is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"apps": null, "harness": {"max_turns": 0}}', "harness.max_turns"),
        ('{"harness": {"tool_listing": "tiny"}}', "harness.tool_listing"),
        ('{"harness": {}, "tools": []}', "tools"),
        ("{}", "harness"),
        ("not json", "(file)"),
    ],
)
def test_malformed_files_name_the_file_and_the_field(tmp_path, text, named):
    (tmp_path / HARNESS_FILE).write_text(text)
    with pytest.raises(ValueError, match="harness settings") as error:
        read_policy_harness(tmp_path)
    assert str(tmp_path / HARNESS_FILE) in str(error.value) and f"{named}:" in str(error.value)
    assert isinstance(error.value, RecipeError)  # the CLI prints it as one line


def test_the_terminal_harness_runs_with_the_turn_limit_the_policy_was_taught_scripts_with(tmp_path):
    taught = PolicyHarness(apps=("sheets",), harness=TRAINED, terminal_max_tokens_per_turn=384)
    assert taught.for_terminal().harness == TRAINED.model_copy(update={"max_tokens_per_turn": 384})
    assert taught.for_terminal().apps == ("sheets",)
    untaught = PolicyHarness(harness=TRAINED)
    assert untaught.for_terminal() is untaught
    write_policy_harness(tmp_path, taught)
    assert read_policy_harness(tmp_path) == taught
    (tmp_path / HARNESS_FILE).write_text('{"harness": {}}')  # written before the field existed: still read
    assert read_policy_harness(tmp_path).terminal_max_tokens_per_turn is None


def test_training_keeps_the_terminal_turn_limit_it_started_from():
    assert PolicyHarness.from_training(TRAINED, None, 384).terminal_max_tokens_per_turn == 384
    assert PolicyHarness.from_training(TRAINED, None).terminal_max_tokens_per_turn is None
