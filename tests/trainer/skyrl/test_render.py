"""SkyRL overrides of the two cluster profiles: golden files, the mapping tables, the rules a set must keep.

Golden files: ``golden/<profile>.txt`` hold the rendered overrides, one ``key=value`` per line, sorted. After an
intended change, regenerate them and review the diff:

    RECIPE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/trainer/skyrl/test_render.py
"""

import os
from dataclasses import replace
from pathlib import Path

import pytest

from cli.commands.cluster import skyrl_run
from flows.config import load_profile
from trainer.algorithms.config import AdvantageEstimator, Aggregation, AlgorithmConfig, PolicyLoss, TisMode
from trainer.algorithms.defects import RewardDefect
from trainer.local.trainer import LRSchedule
from trainer.skyrl.mappings import (
    ADVANTAGES,
    LOSS_REDUCTIONS,
    LR_SCHEDULES,
    POLICY_LOSSES,
    SEQUENCE_MASKS,
    TIS_MODES,
    UnsupportedSetting,
    algorithm_keys,
)
from trainer.skyrl.render import render
from trainer.skyrl.values import parse_overrides, problems

GOLDEN = Path(__file__).parent / "golden"
PROFILES = ("qwen36-35b", "qwen35-397b")


def _values(profile: str, **changes) -> dict:
    return render(replace(skyrl_run(load_profile(profile)), **changes)).values


@pytest.mark.parametrize("profile", PROFILES)
def test_rendered_overrides_match_the_golden_file(profile: str) -> None:
    rendered = "\n".join(render(skyrl_run(load_profile(profile))).lines()) + "\n"
    golden = GOLDEN / f"{profile}.txt"
    if os.environ.get("RECIPE_UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"re-render differs from {golden}; see the module docstring to regenerate"


@pytest.mark.parametrize("profile", PROFILES)
def test_golden_files_read_back_as_the_rendered_values(profile: str) -> None:
    lines = (GOLDEN / f"{profile}.txt").read_text().splitlines()
    assert lines == sorted(lines)
    assert parse_overrides(lines) == _values(profile)
    assert problems(parse_overrides(lines)) == []


def test_the_35b_hero_configuration() -> None:
    """RECIPE "Hero configuration" for Qwen3.6-35B-A3B, key by key."""
    values = _values("qwen36-35b")
    expected = {
        # algorithm: GRPO without std, DPPO binary-TV δ 0.15 / 0.15, prompt_mean, no KL, zero-variance filter
        "trainer.algorithm.advantage_estimator": "grpo",
        "trainer.algorithm.grpo_norm_by_std": False,
        "trainer.algorithm.policy_loss_type": "dppo",
        "trainer.algorithm.dppo.dppo_type": "binary_tv",
        "trainer.algorithm.dppo.delta_low": 0.15,
        "trainer.algorithm.dppo.delta_high": 0.15,
        "trainer.algorithm.loss_reduction": "prompt_mean",
        "trainer.algorithm.use_kl_loss": False,
        "trainer.algorithm.zero_variance_filter": True,
        "trainer.algorithm.zero_variance_filter_tol": 1e-6,
        # fully async: staleness 3, 64 workers, zero-variance groups dropped and the batch refilled
        "trainer.fully_async.enabled": True,
        "trainer.fully_async.max_staleness_steps": 3,
        "trainer.fully_async.num_parallel_generation_workers": 64,
        "trainer.fully_async.sample_full_batch": True,
        # 3 trajectories/s, at most 550 in flight
        "generator.rate_limit.enabled": True,
        "generator.rate_limit.trajectories_per_second": 3.0,
        "generator.rate_limit.max_concurrency": 550,
        # 16 prompts × 16 samples
        "trainer.train_batch_size": 16,
        "trainer.policy_mini_batch_size": 16,
        "generator.n_samples_per_prompt": 16,
        # train context 160k, per-turn 50k
        "generator.max_input_length": 160_000,
        "generator.sampling_params.max_generate_length": 50_000,
        "trainer.max_prompt_length": 110_000,
        "generator.sampling_params.temperature": 1.0,
        # Adam lr 1e-6, betas (0.9, 0.98), wd 0.01, clip 1.0
        "trainer.policy.optimizer_config.lr": 1e-6,
        "trainer.policy.optimizer_config.adam_betas": [0.9, 0.98],
        "trainer.policy.optimizer_config.weight_decay": 0.01,
        "trainer.policy.optimizer_config.max_grad_norm": 1.0,
        # 10 vLLM engines × TP8 + 4 train nodes, Megatron TP8 / EP8
        "generator.inference_engine.num_engines": 10,
        "generator.inference_engine.tensor_parallel_size": 8,
        "generator.inference_engine.engine_init_kwargs.max_model_len": 262_144,
        "trainer.placement.colocate_all": False,
        "trainer.placement.policy_num_nodes": 4,
        "trainer.placement.policy_num_gpus_per_node": 8,
        "trainer.policy.megatron_config.tensor_model_parallel_size": 8,
        "trainer.policy.megatron_config.expert_model_parallel_size": 8,
        "trainer.policy.megatron_config.pipeline_model_parallel_size": 1,
        "trainer.policy.megatron_config.context_parallel_size": 1,
        "trainer.policy.megatron_config.optimizer_config_kwargs.optimizer_cpu_offload": False,
        # 3 epochs, checkpoint every 5, eval every 20
        "trainer.epochs": 3,
        "trainer.ckpt_interval": 5,
        "trainer.eval_interval": 20,
        "trainer.resume_mode": "latest",
        # no SkyRL key: our section
        "rl_recipe.harness.context_nudge": True,
        "rl_recipe.harness.context_nudge_threshold": 0.2,
        "rl_recipe.harness.tool_result_max_chars": 42_000,
        "rl_recipe.harness.agent_timeout_s": 3600.0,
        "rl_recipe.harness.eval_context_budget_tokens": 262_144,
    }
    assert {key: values[key] for key in expected} == expected


def test_the_397b_layout() -> None:
    """12 engines × TP8 + 8 train nodes, Megatron TP4 / PP4 / CP2 / EP16, 300 in flight, 40k per turn."""
    values = _values("qwen35-397b")
    megatron = "trainer.policy.megatron_config."
    assert [values[megatron + k] for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size")] == [4, 4]
    assert [values[megatron + k] for k in ("context_parallel_size", "expert_model_parallel_size")] == [2, 16]
    assert values["trainer.placement.policy_num_nodes"] == 8 and values["generator.inference_engine.num_engines"] == 12
    assert values["generator.rate_limit.max_concurrency"] == 300
    assert values["generator.sampling_params.max_generate_length"] == 40_000
    assert values["trainer.remove_microbatch_padding"] is True  # context parallel needs packed micro-batches


def test_optimizer_offload_turns_on_its_megatron_keys() -> None:
    values = _values("qwen35-397b", optimizer_offload_fraction=0.5)
    kwargs = "trainer.policy.megatron_config.optimizer_config_kwargs."
    assert values[kwargs + "optimizer_cpu_offload"] is True and values[kwargs + "optimizer_offload_fraction"] == 0.5


@pytest.mark.parametrize(
    ("table", "members"),
    [
        (ADVANTAGES, list(AdvantageEstimator)),
        (POLICY_LOSSES, list(PolicyLoss)),
        (LOSS_REDUCTIONS, list(Aggregation)),
        (TIS_MODES, list(TisMode)),
        (SEQUENCE_MASKS, [False, True]),
        (LR_SCHEDULES, list(LRSchedule)),
    ],
)
def test_every_member_of_our_enums_has_a_table_entry(table: dict, members: list) -> None:
    assert set(table) == set(members)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"policy_loss": "glm5"}, {"policy_loss_type": "rollout_is", "eps_clip_low": 0.5, "eps_clip_high": 4.0}),
        ({"policy_loss": "ppo_clip", "tis_mode": "token"}, {"policy_loss_type": "regular", "eps_clip_low": 0.2}),
        (
            {"policy_loss": "ppo_clip", "tis_mode": "sequence", "geometric_mask": True},
            {
                "off_policy_correction.tis_ratio_type": "sequence",
                "off_policy_correction.sequence_tis_ratio_clip_high": 5.0,
                "off_policy_correction.sequence_mask_metric": "geometric",
                "off_policy_correction.geo_mask_low": 0.99,
            },
        ),
        ({"policy_loss": "dppo_binary_kl"}, {"policy_loss_type": "dppo", "dppo.dppo_type": "binary_kl"}),
        (
            {"aggregation": "seq_mean_token_sum_norm", "token_sum_norm_len": 4096},
            {"loss_reduction": "seq_mean_token_sum_norm", "max_seq_len": 4096},
        ),
        ({"advantage_estimator": "grpo", "norm_adv_by_std": True}, {"grpo_norm_by_std": True}),
        ({"advantage_estimator": "rloo"}, {"advantage_estimator": "rloo"}),
    ],
)
def test_algorithm_tables(changes: dict, expected: dict) -> None:
    keys = algorithm_keys(AlgorithmConfig(**changes))
    assert {key: keys[key] for key in expected} == expected


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"trainer.lr_schedule": "cosine", "trainer.total_steps": 10}, "cosine"),
        ({"trainer.algorithm.advantage_estimator": "rloo", "trainer.algorithm.norm_adv_by_std": True}, "rloo"),
        ({"rollout.rate_limit_per_s": 0.5}, "minimum of 1"),
        ({"rollout.workers": 8}, "num_parallel_generation_workers 8 outside [mini-batch 16"),
        ({"cluster.megatron_tensor_parallel": 3}, "not a multiple of Megatron TP"),
    ],
)
def test_settings_skyrl_cannot_express_are_one_clear_error(change: dict, message: str) -> None:
    config = load_profile("qwen36-35b", [f"{k}={v}" for k, v in change.items()])
    with pytest.raises(UnsupportedSetting, match=message.replace("[", r"\[")):
        render(skyrl_run(config))


def test_a_gate_matrix_defect_never_reaches_a_skyrl_job() -> None:
    with pytest.raises(UnsupportedSetting, match="gate-matrix defect"):
        algorithm_keys(AlgorithmConfig(defect=RewardDefect.SHUFFLED_REWARDS))


def test_a_job_generates_with_the_runs_engines_and_starts_none_of_its_own() -> None:
    """One owner of the engines (``flows.ledger``): the job's SkyRL client and router use the run's fleet."""
    fleet = ("http://10.0.0.5:8000", "http://10.0.0.6:8000")
    values = _values("qwen36-35b", fleet_urls=fleet, engine_token_file="/shared/r1/engines/token")
    assert values["generator.inference_engine.run_engines_locally"] is False
    assert values["generator.inference_engine.external_server_urls"] == list(fleet)
    assert values["rl_recipe.engine.token_file"] == "/shared/r1/engines/token"
    assert not any("router_init_kwargs" in key or "api_key" in key for key in values)  # the router holds no key
    own = _values("qwen36-35b", fleet_urls=None, engine_token_file=None)
    assert own["generator.inference_engine.run_engines_locally"] is True
    assert "generator.inference_engine.external_server_urls" not in own
