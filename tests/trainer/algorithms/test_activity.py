"""Mechanism activity by hand: length penalty mean, overlong share, weights vs token_mean (TV), over-steps totals."""

import pytest
import torch

from trainer.algorithms import (
    MechanismActivity,
    length_penalty_mean,
    overlong_dropped_share,
    token_weights,
    weights_vs_token_mean,
)


def test_length_penalty_mean_is_the_mean_penalty_per_trajectory():
    # the ALP penalties of test_filters' example: (0.15 + 0.15 + 0 + 0.075 + 0.6 + 0.025) / 6 = 1 / 6
    penalty = torch.tensor([0.15, 0.15, 0, 0.075, 0.6, 0.025], dtype=torch.float64)
    assert length_penalty_mean(penalty) == pytest.approx(1 / 6)
    assert length_penalty_mean(torch.zeros(4)) == 0.0
    assert length_penalty_mean(torch.zeros(0)) == 0.0


def test_overlong_dropped_share_is_over_the_kept_trajectories():
    assert overlong_dropped_share(1, 4) == 0.25
    assert overlong_dropped_share(0, 0) == 0.0
    with pytest.raises(ValueError, match=r"overlong_masked must be in \[0, 4\], got 5"):
        overlong_dropped_share(5, 4)


def test_weights_vs_token_mean_by_hand():
    # a: sequence 0 with 2 loss tokens; b: sequence 1 with 1. prompt_mean: a tokens 1/(2·2) = 1/4 each, b 1/(2·1) = 1/2;
    # token_mean: 1/3 each. TV = ½ (|1/4 − 1/3|·2 + |1/2 − 1/3|) = ½ (1/6 + 1/6) = 1/6
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])
    prompt_mean = token_weights(mask, ["a", "b"], "prompt_mean")
    assert weights_vs_token_mean(prompt_mean, mask) == pytest.approx(1 / 6)
    assert weights_vs_token_mean(token_weights(mask, ["a", "b"], "token_mean"), mask) == 0.0
    # seq_mean_token_sum_norm weights do not sum to 1; normalised they are token_mean's: 0
    normed = token_weights(mask, ["a", "b"], "seq_mean_token_sum_norm", max_len=8)
    assert weights_vs_token_mean(normed, mask) == pytest.approx(0.0, abs=1e-12)
    # groups of equal token counts: prompt_mean is token_mean
    even = torch.tensor([[1, 1], [1, 1]])
    assert weights_vs_token_mean(token_weights(even, ["a", "b"], "prompt_mean"), even) == pytest.approx(0.0, abs=1e-12)
    # all weight on one token of four: TV = ½ (3/4 + 3·1/4) = 3/4; nothing to weigh: 0
    one_hot = torch.tensor([[1.0, 0, 0, 0]])
    assert weights_vs_token_mean(one_hot, torch.ones(1, 4)) == pytest.approx(0.75)
    assert weights_vs_token_mean(torch.zeros(1, 4), torch.zeros(1, 4)) == 0.0
    with pytest.raises(ValueError, match="weights_BT has shape"):
        weights_vs_token_mean(torch.zeros(1, 3), torch.zeros(1, 4))


def test_activity_over_steps_sums_counts_and_averages_shares():
    steps = [
        MechanismActivity(nudges_inserted=2, dppo_masked_share=0.1, ratio_abs_dev_mean=0.2, length_penalty_mean=0.5),
        MechanismActivity(nudges_inserted=3, dppo_masked_share=0.3, ratio_abs_dev_mean=0.4, overlong_dropped_share=0.5),
    ]
    total = MechanismActivity.over_steps(steps)
    assert total is not None
    assert total.nudges_inserted == 5
    assert total.dppo_masked_share == pytest.approx(0.2)
    assert total.ratio_abs_dev_mean == pytest.approx(0.3)
    assert total.overlong_dropped_share == pytest.approx(0.25)
    assert total.length_penalty_mean == pytest.approx(0.25)
    assert total.weights_vs_token_mean == 0.0
    assert MechanismActivity.over_steps([]) is None
