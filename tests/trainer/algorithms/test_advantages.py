import pytest
import torch

from trainer.algorithms import (
    AlgorithmConfig,
    broadcast_to_tokens,
    compute_advantages,
    grpo_advantages,
    normalize_by_group_std,
    rloo_advantages,
)

GRPO_STD = AlgorithmConfig(advantage_estimator="grpo", norm_adv_by_std=True)
DR_GRPO = AlgorithmConfig(advantage_estimator="grpo", norm_adv_by_std=False)
RLOO = AlgorithmConfig(advantage_estimator="rloo")


def rewards(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_grpo_with_std():
    # group a = [1, 0]: mean 0.5, unbiased std sqrt((0.25 + 0.25) / 1) = 0.70711 → A = ±0.5 / (0.70711 + 1e-6)
    # group b = [1, 1]: mean 1, std 0 → A = 0 / 1e-6 = 0
    # group c = [0.3]: a group of one has mean 0 and std 1 → A = 0.3 / (1 + 1e-6)
    got = compute_advantages(rewards(1, 0, 1, 1, 0.3), ["a", "a", "b", "b", "c"], GRPO_STD)
    half = 0.5 / (2**-0.5 + 1e-6)
    torch.testing.assert_close(got, rewards(half, -half, 0, 0, 0.3 / (1 + 1e-6)))


def test_grpo_std_is_unbiased():
    # [0, 3, 6]: mean 3, Σ(R − mean)² = 18, unbiased var 18 / 2 = 9, std 3 → A = [-3, 0, 3] / (3 + 1e-6)
    got = compute_advantages(rewards(0, 3, 6), [7, 7, 7], GRPO_STD)
    torch.testing.assert_close(got, rewards(-3, 0, 3) / (3 + 1e-6))


def test_dr_grpo_has_no_std():
    # [1, 0, 0]: mean 1/3 → A = [2/3, -1/3, -1/3]; group of one [0.3] → mean 0 → A = 0.3
    got = compute_advantages(rewards(1, 0, 0, 0.3), ["a", "a", "a", "c"], DR_GRPO)
    torch.testing.assert_close(got, rewards(2 / 3, -1 / 3, -1 / 3, 0.3))
    torch.testing.assert_close(grpo_advantages(rewards(1, 0, 0, 0.3), ["a", "a", "a", "c"]), got)


def test_rloo_is_leave_one_out():
    # [1, 0, 0]: G/(G−1) = 1.5, R − mean = [2/3, -1/3, -1/3] → [1, -0.5, -0.5];
    # equivalently R_i − mean of the others: 1 − 0 = 1, 0 − 0.5 = -0.5. Group of one [0.3] → 0.3.
    got = compute_advantages(rewards(1, 0, 0, 0.3), ["a", "a", "a", "c"], RLOO)
    torch.testing.assert_close(got, rewards(1, -0.5, -0.5, 0.3))
    torch.testing.assert_close(rloo_advantages(rewards(1, 0, 0, 0.3), ["a", "a", "a", "c"]), got)


def test_groups_may_interleave_and_be_tensors():
    # Group 5 = rewards [2, 4] (mean 3), group 9 = [10, 0] (mean 5), interleaved in the batch.
    got = compute_advantages(rewards(2, 10, 4, 0), torch.tensor([5, 9, 5, 9]), DR_GRPO)
    torch.testing.assert_close(got, rewards(-1, 5, 1, -5))


def test_std_normalisation_of_rloo():
    # [1, 0]: RLOO A = 2 · [0.5, -0.5] = [1, -1]; std sqrt(0.5) → A = ±1 / (0.70711 + 1e-6)
    config = AlgorithmConfig(advantage_estimator="rloo", norm_adv_by_std=True)
    got = compute_advantages(rewards(1, 0), ["a", "a"], config)
    scale = 1 / (2**-0.5 + 1e-6)
    torch.testing.assert_close(got, rewards(scale, -scale))
    torch.testing.assert_close(normalize_by_group_std(rewards(1, -1), rewards(1, 0), ["a", "a"]), got)


def test_integer_rewards_are_accepted():
    got = compute_advantages(torch.tensor([1, 0]), ["a", "a"], DR_GRPO)
    torch.testing.assert_close(got, torch.tensor([0.5, -0.5]))


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="rewards_B must be 1-D"):
        compute_advantages(torch.zeros(2, 2), ["a", "a"], DR_GRPO)
    with pytest.raises(ValueError, match="group_ids_B has 1 entries but the batch has 2"):
        compute_advantages(rewards(1, 0), ["a"], DR_GRPO)


def test_broadcast_to_tokens():
    # A = [2, -1] on masks [1 1 0] and [0 1 1]
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    got = broadcast_to_tokens(rewards(2, -1), mask)
    torch.testing.assert_close(got, rewards(2, 2, 0, 0, -1, -1).reshape(2, 3))
    with pytest.raises(ValueError, match="does not match advantages_B"):
        broadcast_to_tokens(rewards(2, -1, 0), mask)
