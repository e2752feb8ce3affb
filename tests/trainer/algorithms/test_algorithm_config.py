import pytest
from pydantic import ValidationError

from trainer.algorithms import AdvantageEstimator, Aggregation, AlgorithmConfig, PolicyLoss, TisMode


def test_defaults_are_the_hero_configuration():
    config = AlgorithmConfig()
    assert config.advantage_estimator == AdvantageEstimator.GRPO
    assert config.norm_adv_by_std is False
    assert config.policy_loss == PolicyLoss.DPPO_BINARY_TV
    assert (config.dppo_delta_low, config.dppo_delta_high) == (0.15, 0.15)
    assert config.aggregation == Aggregation.PROMPT_MEAN
    assert config.overlong_filter is False
    assert config.zero_variance_tol == 1e-6
    assert config.tis_mode == TisMode.NONE
    assert (config.alp_assistant_coef, config.alp_env_coef) == (0.0, 0.0)
    assert (config.glm5_eps_low, config.glm5_eps_high) == (0.5, 4.0)
    assert (config.geometric_mask_low, config.geometric_mask_high) == (0.99, 1.01)


def test_options_parse_from_strings():
    config = AlgorithmConfig.model_validate({"policy_loss": "glm5", "aggregation": "token_mean"})
    assert config.policy_loss is PolicyLoss.GLM5
    assert config.aggregation is Aggregation.TOKEN_MEAN


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dppo_delta_low": 0.0}, "dppo_delta_low\n  Input should be greater than 0"),
        ({"dppo_delta_high": -0.1}, "dppo_delta_high\n  Input should be greater than 0"),
        ({"glm5_eps_low": 1.0}, "glm5_eps_low\n  Input should be less than 1"),
        ({"ppo_eps_low": 1.5}, "ppo_eps_low\n  Input should be less than 1"),
        ({"geometric_mask_high": 0.999}, "geometric_mask_high\n  Input should be greater than 1"),
        ({"zero_variance_tol": -1.0}, "zero_variance_tol\n  Input should be greater than or equal to 0"),
        ({"policy_loss": "reinforce"}, "policy_loss\n  Input should be 'ppo_clip', 'glm5'"),
        ({"clip_eps": 0.2}, "clip_eps\n  Extra inputs are not permitted"),
        ({"aggregation": "seq_mean_token_sum_norm"}, "needs token_sum_norm_len"),
        ({"tis_mode": "token"}, "cannot be combined with policy_loss 'dppo_binary_tv'"),
    ],
)
def test_bad_values_name_the_field(overrides, message):
    with pytest.raises(ValidationError, match=message):
        AlgorithmConfig(**overrides)


def test_valid_combinations():
    AlgorithmConfig(aggregation="seq_mean_token_sum_norm", token_sum_norm_len=4096)
    AlgorithmConfig(policy_loss="ppo_clip", tis_mode="sequence")
    AlgorithmConfig(policy_loss="dppo_binary_kl", geometric_mask=True)
