import pytest
import torch

from trainer.algorithms import Aggregation, token_weights

# Three sequences with T = [3, 1, 2] loss tokens (6 in all); sequences 0 and 1 share prompt group "a", 2 is "b".
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]])
GROUPS = ["a", "a", "b"]


def expected(row0: float, row1: float, row2: float) -> torch.Tensor:
    return MASK * torch.tensor([[row0], [row1], [row2]])


def test_token_mean():
    # 1 / Σ T = 1/6 on every loss token
    torch.testing.assert_close(token_weights(MASK, GROUPS, Aggregation.TOKEN_MEAN), expected(1 / 6, 1 / 6, 1 / 6))


def test_sequence_mean():
    # 1 / (B · T_i) with B = 3: 1/9, 1/3, 1/6
    torch.testing.assert_close(token_weights(MASK, GROUPS, "sequence_mean"), expected(1 / 9, 1 / 3, 1 / 6))


def test_seq_mean_token_sum_norm():
    # 1 / (B · L) with L = 4: 1/12 everywhere
    got = token_weights(MASK, GROUPS, Aggregation.SEQ_MEAN_TOKEN_SUM_NORM, max_len=4)
    torch.testing.assert_close(got, expected(1 / 12, 1 / 12, 1 / 12))
    with pytest.raises(ValueError, match="positive fixed max length L"):
        token_weights(MASK, GROUPS, Aggregation.SEQ_MEAN_TOKEN_SUM_NORM)


def test_prompt_mean():
    # P = 2; group a holds 3 + 1 = 4 tokens → 1/(2·4) = 1/8; group b holds 2 → 1/(2·2) = 1/4
    got = token_weights(MASK, GROUPS, Aggregation.PROMPT_MEAN)
    torch.testing.assert_close(got, expected(1 / 8, 1 / 8, 1 / 4))
    # each group's weights sum to 1/P
    assert got[:2].sum().item() == pytest.approx(0.5)
    assert got[2].sum().item() == pytest.approx(0.5)


def test_prompt_mean_loss_value():
    # ℓ = 1 on every token of group a and 4 on group b: (1/2)(4·1/4 + 2·4/2) = (1/2)(1 + 4) = 2.5,
    # whereas token_mean gives (4·1 + 2·4)/6 = 2
    loss = MASK * torch.tensor([[1.0], [1.0], [4.0]])
    assert (token_weights(MASK, GROUPS, "prompt_mean") * loss).sum().item() == pytest.approx(2.5)
    assert (token_weights(MASK, GROUPS, "token_mean") * loss).sum().item() == pytest.approx(2.0)


def test_empty_sequence_and_group_get_zero_weight():
    # Group "c" (row 2) has no loss tokens: it gets weight 0 but still counts in P = 2 (the formula's 1/P).
    mask = torch.tensor([[1, 1], [0, 0]])
    got = token_weights(mask, ["a", "c"], "prompt_mean")
    torch.testing.assert_close(got, torch.tensor([[0.25, 0.25], [0.0, 0.0]]))
    torch.testing.assert_close(token_weights(mask, ["a", "c"], "sequence_mean"), got)
    torch.testing.assert_close(token_weights(torch.zeros(1, 3), ["a"], "token_mean"), torch.zeros(1, 3))


def test_bad_inputs():
    with pytest.raises(ValueError, match="loss_mask_BT must be 2-D"):
        token_weights(torch.ones(3), GROUPS, "token_mean")
    with pytest.raises(KeyError, match="unknown token aggregation 'mean'; known: prompt_mean"):
        token_weights(MASK, GROUPS, "mean")
