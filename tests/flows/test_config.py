"""Profiles: every shipped profile validates; a bad key or value fails before anything runs, naming its path."""

from pathlib import Path

import pytest

from envs.harness.tool_formats import ToolFormatName
from flows.config import PROFILES_DIR, Defect, ProfileError, StageName, apply_overrides, load_profile
from flows.inputs import stage_defects
from flows.stage import stage_fingerprint
from tasks.run_store import RunStore

SHIPPED = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def test_the_four_profiles_ship() -> None:
    assert {"smoke", "local", "qwen36-35b", "qwen35-397b"} <= set(SHIPPED)


def test_the_demo_speaks_the_named_models_format_and_local_hermes_keeps_the_hermes_base() -> None:
    local, hermes = load_profile("local").planned_harness(), load_profile("local-hermes")
    assert (local.tool_format, local.thinking) == (ToolFormatName.QWEN3_XML, True)
    # thinking None with Hermes: the base's content hash is the one built before dialects existed (a cached base stays)
    assert (hermes.policy.bootstrap.tool_format, hermes.policy.bootstrap.thinking) == (ToolFormatName.HERMES_JSON, None)
    assert hermes.planned_harness().tool_format is ToolFormatName.HERMES_JSON


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_validates(name: str) -> None:
    config = load_profile(name)
    assert config.profile == name and len(config.digest()) == 16


def test_cluster_profiles_carry_the_recipes_numbers() -> None:
    for name, concurrency, per_turn in (("qwen36-35b", 550, 50_000), ("qwen35-397b", 300, 40_000)):
        config = load_profile(name)
        assert config.trainer.lr == 1e-6 and config.trainer.betas == (0.9, 0.98)
        assert config.trainer.algorithm.policy_loss == "dppo_binary_tv"
        assert config.trainer.algorithm.dppo_delta_low == config.trainer.algorithm.dppo_delta_high == 0.15
        assert config.trainer.algorithm.aggregation == "prompt_mean" and not config.trainer.algorithm.norm_adv_by_std
        r = config.rollout
        assert (r.prompts_per_step, r.samples_per_prompt, r.max_staleness, r.workers) == (16, 16, 3, 64)
        assert r.max_concurrency == concurrency and r.rate_limit_per_s == 3
        assert config.harness["max_tokens_per_turn"] == per_turn and config.harness["tool_result_max_chars"] == 42_000


def test_a_bad_key_and_a_bad_value_are_both_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("profile: x\nstages:\n  overfit:\n    stpes: 3\n    subset_size: -1\n")
    with pytest.raises(ProfileError) as failure:
        load_profile(bad)
    message = str(failure.value)
    assert "stages.overfit.stpes: Extra inputs are not permitted" in message
    assert "stages.overfit.subset_size: Input should be greater than or equal to 2" in message


def test_overrides_are_validated_like_the_file() -> None:
    config = load_profile("local", ["stages.overfit.steps=3", "stages.systems.sweep.workers=[2, 4]"])
    assert config.stages.overfit.steps == 3 and config.stages.systems.sweep.workers == (2, 4)
    with pytest.raises(ProfileError, match=r"stages\.overfit\.steps: Input should be greater than or equal to 1"):
        load_profile("local", ["stages.overfit.steps=0"])
    with pytest.raises(ProfileError, match="is not KEY=VALUE"):
        apply_overrides({}, ["stages.overfit.steps"])


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ProfileError, match=r"profiles are: .*local"):
        load_profile("nonexistent")


def test_cross_field_rules() -> None:
    with pytest.raises(ProfileError, match=r"needs engine\.url"):
        load_profile("local", ["backends.engine=openai"])
    with pytest.raises(ProfileError, match="harness: max_turns"):
        load_profile("local", ["harness.max_turns=0"])
    with pytest.raises(ProfileError, match="arm 'x': policy_loss: Input should be"):
        load_profile("local", ["stages.ablations.arms.x.algorithm.policy_loss=nope"])
    with pytest.raises(ProfileError, match="baseline arm 'baseline' is not among the arms"):
        load_profile("local", ["stages.ablations.arms.x.algorithm.policy_loss=glm5"])


def test_retention_is_the_heros_and_needs_our_trainer() -> None:
    config = load_profile("local", ["stages.hero.retention.coef=0.5", "stages.hero.retention.sources=[mcq]"])
    assert config.stages.hero.retention.coef == 0.5 and config.stages.hero.retention.sources == ("mcq",)
    with pytest.raises(ProfileError, match=r"stages\.hero\.retention\.sources\.0: Input should be"):
        load_profile("local", ["stages.hero.retention.sources=[bash]"])
    with pytest.raises(ProfileError, match=r"use stages\.hero\.retention"):
        load_profile("local", ["trainer.retention={path: r.jsonl, coef: 1}"])
    with pytest.raises(ProfileError, match="SkyRL's trainer has no PPO-ptx term"):
        load_profile("qwen36-35b", ["stages.hero.retention.coef=0.1"])


def test_stage_order_and_folders() -> None:
    assert [s.folder for s in StageName] == [
        "1-derisk", "2-tito", "3-systems", "4-overfit", "5-ablations", "6-hero", "7-transfer"
    ]  # fmt: skip


def test_a_profile_extends_another_and_changes_only_what_it_names(tmp_path: Path) -> None:
    cpu = load_profile("cluster-cpu")
    local = load_profile("local")
    assert cpu.stages.overfit == local.stages.overfit and cpu.policy == local.policy  # inherited whole
    assert cpu.trainer == local.trainer and cpu.stages.systems.thresholds == local.stages.systems.thresholds
    assert cpu.stages.systems.sweep.max_num_seqs == () and local.stages.systems.sweep.max_num_seqs == (32,)
    assert cpu.backends.engine == "vllm" and cpu.profile == "cluster-cpu"
    child = tmp_path / "child.yaml"
    child.write_text("extends: smoke\nprofile: child\nstages: {overfit: {steps: 7}}\n")
    config = load_profile(child)
    assert config.stages.overfit.steps == 7 and config.stages.overfit.subset_size == 2  # merged key by key
    loop = tmp_path / "loop.yaml"
    loop.write_text(f"extends: {loop}\nprofile: loop\n")
    with pytest.raises(ProfileError, match="deeper than 8 profiles"):
        load_profile(loop)
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: [local]\nprofile: bad\n")
    with pytest.raises(ProfileError, match="extends names a profile"):
        load_profile(bad)


def test_a_defect_is_an_input_of_its_own_stage_only(tmp_path: Path) -> None:
    healthy = load_profile("smoke")
    defective = healthy.model_copy(update={"defects": (Defect.INVERTED_ADVANTAGES,)})
    store = RunStore(tmp_path / "run")
    changed = [s for s in StageName if stage_fingerprint(healthy, s, store) != stage_fingerprint(defective, s, store)]
    # A run resumed with the defect re-runs overfit (the stages after it follow through their upstream fingerprints)
    # and reuses de-risk, TITO and systems; a healthy run's fingerprints do not mention defects at all.
    assert changed == [StageName.OVERFIT]
    assert stage_defects(defective, StageName.OVERFIT) == [Defect.INVERTED_ADVANTAGES]
    assert stage_defects(defective, StageName.HERO) == []


EXAMPLES = Path(__file__).parents[2] / "examples" / "environments"


def test_a_teams_environment_is_one_set_away_and_checked_when_the_profile_loads(tmp_path: Path) -> None:
    config = load_profile("smoke", [f"environment={EXAMPLES / 'git-history'}"])
    assert config.environment.file == EXAMPLES / "git-history" and config.environment.data == Path("data")
    assert load_profile("smoke", ["environment.verifiers=ledger-tasks"]).environment.verifiers == "ledger-tasks"
    broken = tmp_path / "environment.yaml"
    broken.write_text("name: x\nservers: [{name: git}]\nworlds: [{id: w}]\ntasks: t.jsonl\n")
    with pytest.raises(ProfileError, match=r"environment: .*give exactly one of command \(stdio\) or url"):
        load_profile("smoke", [f"environment={broken}"])
    with pytest.raises(ProfileError, match="runs in the local sandbox"):
        load_profile("smoke", [f"environment={EXAMPLES / 'git-history'}", "backends.sandbox=docker"])
    with pytest.raises(ProfileError, match=r"environment\.file or environment\.verifiers, not both"):
        load_profile("smoke", [f"environment.file={EXAMPLES / 'git-history'}", "environment.verifiers=x"])


def test_a_config_is_validated_once_per_process_and_its_errors_every_time() -> None:
    from flows.config import validate_config

    raw = load_profile("smoke").model_dump(mode="json")
    first = validate_config(raw, "run.json")
    assert validate_config(dict(raw), "run.json") is first  # the stage flows read the run's config again: no re-check
    changed = raw | {"seed": 7}
    assert validate_config(changed, "run.json").seed == 7
    with pytest.raises(ProfileError, match="seed"):
        validate_config(raw | {"seed": -1}, "run.json")
    with pytest.raises(ProfileError, match="seed"):  # a bad config is never remembered
        validate_config(raw | {"seed": -1}, "run.json")
