import pytest
import torch

from trainer.algorithms import adaptive_length_penalty, overlong_filter, zero_variance_filter


def test_overlong_filter_masks_unnatural_stops():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 1], [1, 0, 0]])
    got = overlong_filter(mask, ["stop", "length", "stop", "context_length"])
    torch.testing.assert_close(got, torch.tensor([[1, 1, 0], [0, 0, 0], [0, 1, 1], [0, 0, 0]]))
    with pytest.raises(ValueError, match="stop_reasons_B has 1 entries but loss_mask_BT has 4 rows"):
        overlong_filter(mask, ["stop"])


def test_zero_variance_filter():
    # a = [1, 1] spread 0 → dropped; b = [0, 1] spread 1 → kept; c = [0.5] one sample, spread 0 → dropped;
    # d = [0.2, 0.2 + 1e-7] spread 1e-7 ≤ 1e-6 → dropped; e = [0.2, 0.2 + 1e-5] spread 1e-5 → kept
    rewards = torch.tensor([1, 1, 0, 1, 0.5, 0.2, 0.2 + 1e-7, 0.2, 0.2 + 1e-5], dtype=torch.float64)
    groups = ["a", "a", "b", "b", "c", "d", "d", "e", "e"]
    assert zero_variance_filter(rewards, groups, tol=1e-6) == ["b", "e"]
    assert zero_variance_filter(rewards, groups, tol=2.0) == []
    assert zero_variance_filter(torch.tensor([0, 1, 3, 3]), torch.tensor([4, 4, 2, 2]), tol=0.0) == [4]
    with pytest.raises(ValueError, match="tolerance must be ≥ 0"):
        zero_variance_filter(rewards, groups, tol=-1)


def test_adaptive_length_penalty():
    # Group a (K = 4): rewards [1, 1, 1, 0.5] → 3 solved, p = 0.75; group b (K = 2): [0, 0.9] → p = 0, floor 1/K = 0.5
    # penalty = max(p, 1/K) · (β_a · n_assistant + β_e · n_env) with β_a = 1e-3, β_e = 1e-4:
    #   a0: 0.75 · (0.1 + 0.1) = 0.15   a1: 0.75 · (0.2 + 0) = 0.15   a2: 0.75 · 0 = 0   a3: 0.75 · 0.1 = 0.075
    #   b0: 0.5 · (1.0 + 0.2) = 0.6     b1: 0.5 · 0.05 = 0.025
    rewards = torch.tensor([1, 1, 1, 0.5, 0, 0.9], dtype=torch.float64)
    assistant = torch.tensor([100, 200, 0, 100, 1000, 50])
    env = torch.tensor([1000, 0, 0, 0, 2000, 0])
    got = adaptive_length_penalty(
        rewards, list("aaaabb"), assistant, env, assistant_coef=1e-3, env_coef=1e-4, solve_threshold=1.0
    )
    torch.testing.assert_close(got, torch.tensor([0.15, 0.15, 0, 0.075, 0.6, 0.025], dtype=torch.float64))
    # A lower solve threshold counts 0.5 and 0.9 as solved: a → p = 1, b → p = 0.5 (= the floor).
    got = adaptive_length_penalty(
        rewards, list("aaaabb"), assistant, env, assistant_coef=1e-3, env_coef=0.0, solve_threshold=0.5
    )
    torch.testing.assert_close(got, torch.tensor([0.1, 0.2, 0, 0.1, 0.5, 0.025], dtype=torch.float64))


def test_adaptive_length_penalty_bad_inputs():
    rewards = torch.tensor([1.0, 0.0])
    with pytest.raises(ValueError, match=r"env_tokens_B has shape \(3,\), expected \(2,\)"):
        adaptive_length_penalty(
            rewards, "ab", torch.ones(2), torch.ones(3), assistant_coef=1.0, env_coef=1.0, solve_threshold=1.0
        )
    with pytest.raises(ValueError, match="ALP coefficients must be ≥ 0"):
        adaptive_length_penalty(rewards, "ab", torch.ones(2), torch.ones(2), assistant_coef=-1.0, env_coef=0.0)
