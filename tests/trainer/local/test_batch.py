"""TrainBatch: filters, advantages and token weights by hand; first-fit-decreasing micro-batching."""

import random

import pytest
import torch

from envs.types import StopReason, Trajectory
from trainer.algorithms import AlgorithmConfig
from trainer.local.batch import (
    EmptyBatchError,
    TrainBatch,
    first_fit_decreasing,
    packed_cost,
    padded_cost,
)
from trainer.local.logprobs import Layout


def trajectory(group_id: str, length: int, reward: float, stop: StopReason = StopReason.STOP) -> Trajectory:
    """`length` tokens, the first 4 the prompt; sampled tokens have rollout logprob −0.5."""
    mask = [int(t >= 4) for t in range(length)]
    return Trajectory(
        task_id=group_id,
        group_id=group_id,
        tokens=list(range(10, 10 + length)),
        loss_mask=mask,
        logprobs=[-0.5 * m for m in mask],
        prompt_len=4,
        reward=reward,
        stop_reason=stop,
    )


def test_first_fit_decreasing_by_hand():
    # longest first: 8(#2) 7(#4) 5(#0) 3(#1) 2(#3) 1(#5), budget 10 on Σ len:
    # 8 → new A; 7 → new B (15); 5 → new C; 3 → B (10); 2 → A (10); 1 → C (6)
    assert first_fit_decreasing([5, 3, 8, 2, 7, 1], 10, packed_cost) == [[2, 3], [4, 1], [0, 5]]
    # padded cost rows × longest, budget 16: 8 → A; 7 → A (2·8); 5 → B; 3 → B (2·5); 2 → B (3·5); 1 → new C
    assert first_fit_decreasing([5, 3, 8, 2, 7, 1], 16, padded_cost) == [[2, 4], [0, 1, 3], [5]]
    # a sequence over the budget sits alone; ties keep index order
    assert first_fit_decreasing([12, 3, 3], 5) == [[0], [1], [2]]


@pytest.mark.parametrize("cost", [packed_cost, padded_cost])
def test_packing_respects_budget_places_every_row_once_longest_first(cost):
    rng = random.Random(0)
    for _ in range(200):
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 30))]
        budget = rng.randint(1, 120)
        bins = first_fit_decreasing(lengths, budget, cost)
        assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
        for b in bins:
            held = [lengths[i] for i in b]
            assert len(b) == 1 or cost(held) <= budget
            assert held == sorted(held, reverse=True)
        # FFD: each bin's first (longest) item could not fit any earlier bin when it was placed
        for k, b in enumerate(bins):
            first = lengths[b[0]]
            for earlier in bins[:k]:
                placed_before = [lengths[i] for i in earlier if (-lengths[i], i) < (-first, b[0])]
                assert cost([*placed_before, first]) > budget


def test_first_fit_decreasing_rejects_a_non_positive_budget():
    with pytest.raises(ValueError, match="token budget must be ≥ 1, got 0"):
        first_fit_decreasing([3], 0)


def test_batch_drops_zero_variance_groups_and_weights_prompt_mean_by_hand():
    batch = TrainBatch.from_trajectories(
        [
            trajectory("a", 6, 1.0),  # 2 loss tokens
            trajectory("b", 6, 0.5),  # group b: rewards tie → dropped
            trajectory("a", 8, 0.0),  # 4 loss tokens
            trajectory("c", 5, 1.0),  # 1
            trajectory("b", 9, 0.5),
            trajectory("c", 7, 0.0),  # 3
            trajectory("c", 9, 0.0),  # 5
        ],
        AlgorithmConfig(),  # Dr. GRPO advantages, prompt_mean
    )
    assert batch.group_ids_B == ["a", "a", "c", "c", "c"]
    assert batch.lengths_B.tolist() == [6, 8, 5, 7, 9]
    assert batch.tokens_BT.shape == (5, 9)
    assert batch.num_tokens == 35
    # A = R − mean_g R: a: ±0.5; c: mean 1/3 → 2/3, −1/3, −1/3
    expected_adv = torch.tensor([0.5, -0.5, 2 / 3, -1 / 3, -1 / 3])
    assert torch.allclose(batch.advantages_BT.sum(1) / batch.loss_mask_BT.sum(1), expected_adv)
    # prompt_mean, P = 2: group a has 6 loss tokens → w = 1/12; group c has 9 → w = 1/18
    expected_w = torch.tensor([1 / 12, 1 / 12, 1 / 18, 1 / 18, 1 / 18])
    assert torch.allclose(batch.weights_BT.max(1).values, expected_w)
    assert torch.allclose(batch.weights_BT.sum(), torch.tensor(1.0))
    assert torch.equal(batch.weights_BT > 0, batch.loss_mask_BT.bool())
    assert batch.rollout_logprobs_BT[0].tolist() == [0, 0, 0, 0, -0.5, -0.5, 0, 0, 0]
    assert batch.stats.trajectories_in == 7
    assert batch.stats.groups_in == 3
    assert batch.stats.groups_dropped == 1
    assert batch.stats.reward_mean == pytest.approx(3 / 7)
    assert batch.stats.trajectories_kept == 5
    # token_mean gives each of the 15 loss tokens 1/15; TV = ½ (6·|1/12 − 1/15| + 9·|1/18 − 1/15|) = ½ (1/10 + 1/10)
    assert batch.stats.weights_vs_token_mean == pytest.approx(1 / 10)
    assert (batch.stats.length_penalty_mean, batch.stats.overlong_dropped_share, batch.stats.nudges_inserted) == (
        0,
        0,
        0,
    )


def test_overlong_filter_masks_truncated_trajectories_but_keeps_their_advantage_baseline():
    trajectories = [
        trajectory("a", 6, 1.0),
        trajectory("a", 8, 0.0, StopReason.LENGTH),
        trajectory("a", 7, 0.0, StopReason.TIMEOUT),
    ]
    off = TrainBatch.from_trajectories(trajectories, AlgorithmConfig())
    on = TrainBatch.from_trajectories(trajectories, AlgorithmConfig(overlong_filter=True))
    assert off.loss_mask_BT.sum(1).tolist() == [2, 4, 3]
    assert on.loss_mask_BT.sum(1).tolist() == [2, 0, 0]
    assert on.stats.overlong_masked == 2
    assert (on.stats.overlong_dropped_share, off.stats.overlong_dropped_share) == (pytest.approx(2 / 3), 0.0)
    # the baseline still uses every reward: A_0 = 1 − 1/3; only sequence 0 carries loss, w = 1/(1·2)
    assert torch.allclose(on.advantages_BT[0, 4:6], torch.tensor([2 / 3, 2 / 3]))
    assert on.weights_BT[0, 4:6].tolist() == [0.5, 0.5]
    assert on.weights_BT[1:].abs().sum() == 0


def test_adaptive_length_penalty_shapes_rewards_before_the_zero_variance_filter():
    trajectories = [trajectory("b", 6, 0.5), trajectory("b", 8, 0.5)]
    with pytest.raises(EmptyBatchError, match="all 1 groups"):
        TrainBatch.from_trajectories(trajectories, AlgorithmConfig())
    # solve rate 0 → floor 1/K = 1/2; penalty = 0.5 · 0.01 · assistant tokens (2 and 4)
    batch = TrainBatch.from_trajectories(trajectories, AlgorithmConfig(alp_assistant_coef=0.01))
    assert torch.allclose(batch.rewards_B, torch.tensor([0.49, 0.48]))
    assert batch.stats.length_penalty_mean == pytest.approx(0.015)  # (0.01 + 0.02) / 2
    assert batch.stats.reward_mean == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"loss_mask": [1, 0, 0]}, "loss_mask\\[0\\] is 1"),
        ({"loss_mask": [0, 1]}, "must have the same length"),
        ({"loss_mask": [0, 2, 1]}, "must be 0 or 1"),
        ({"tokens": [], "loss_mask": [], "logprobs": []}, "has no tokens"),
    ],
)
def test_bad_trajectories_are_named(bad, message):
    fields = {"task_id": "t", "group_id": "g", "tokens": [1, 2, 3], "loss_mask": [0, 1, 1], "logprobs": [0, -1, -1]}
    with pytest.raises(ValueError, match=message):
        TrainBatch.from_trajectories([Trajectory(**(fields | bad))], AlgorithmConfig())


def test_micro_batches_cover_the_batch_within_budget():
    batch = TrainBatch.from_trajectories(
        [trajectory("a", n, float(n % 2)) for n in (30, 12, 25, 7, 18, 5)], AlgorithmConfig()
    )
    for layout, cost in ((Layout.PACKED, packed_cost), (Layout.PADDED, padded_cost)):
        micro_batches = batch.micro_batches(40, layout)
        rows = sorted(int(r) for mb in micro_batches for r in mb.rows_S)
        assert rows == list(range(6))
        for mb in micro_batches:
            lengths = batch.lengths_B[mb.rows_S].tolist()
            assert cost(lengths) <= 40
            assert mb.length == max(lengths)
            assert mb.take(batch.tokens_BT).shape == (len(lengths), max(lengths))
    assert [mb.rows_S.tolist() for mb in batch.micro_batches(40)] == [[0, 3], [2, 1], [4, 5]]


def test_the_nudges_the_input_trajectories_carry_are_counted():
    nudged = [trajectory("a", 6, 1.0).model_copy(update={"nudges": 2}), trajectory("a", 7, 0.0)]
    nudged.append(trajectory("b", 6, 0.5).model_copy(update={"nudges": 1}))  # its group is dropped, its nudge counted
    nudged.append(trajectory("b", 6, 0.5))
    assert TrainBatch.from_trajectories(nudged, AlgorithmConfig()).stats.nudges_inserted == 3
