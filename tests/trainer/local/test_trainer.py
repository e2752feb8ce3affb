"""LocalTrainer: micro-batch split invariance, a tiny overfit, metrics, schedules, config errors, weight sync."""

import copy
import math

import pytest
import torch
from pydantic import ValidationError

from trainer.algorithms import AlgorithmConfig, PolicyLoss
from trainer.engine import Engine
from trainer.local.batch import TrainBatch
from trainer.local.logprobs import Layout, token_stats
from trainer.local.trainer import LocalTrainer, LRSchedule, TrainerConfig, lr_multiplier

LENGTHS = [60, 12, 33, 7, 48, 21, 15, 40, 9, 27, 52, 18]
GROUPS = ["a", "a", "a", "b", "b", "b", "c", "c", "c", "d", "d", "d"]
REWARDS = [1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 0.2, 0.9, 0.4, 1.0, 0.0, 0.0]


def step_result(model, batch, **config):
    """(metrics, gradients) of one train_step on a copy of ``model``.

    Weights after the step are not compared: Adam's first update is lr·g/(|g| + ε) ≈ lr·sign(g), so float noise on
    a near-zero gradient entry flips a whole lr-sized step; the gradients themselves are the well-posed quantity.
    """
    trainer = LocalTrainer(copy.deepcopy(model), TrainerConfig(lr=1e-3, **config))
    metrics = trainer.train_step(batch)
    return metrics, {n: p.grad.clone() for n, p in trainer.model.named_parameters()}


@pytest.mark.parametrize("policy_loss", [PolicyLoss.DPPO_BINARY_TV, PolicyLoss.GLM5, PolicyLoss.PPO_CLIP])
def test_step_is_invariant_to_the_micro_batch_split(model, make_trajectories, policy_loss):
    algorithm = AlgorithmConfig(policy_loss=policy_loss)
    trajectories = make_trajectories(LENGTHS, GROUPS, REWARDS, prompt_len=6, shared_prompts=True)
    batch = TrainBatch.from_trajectories(trajectories, algorithm)
    whole, whole_grads = step_result(model, batch, algorithm=algorithm, token_budget=10**6)
    assert whole.micro_batches == 1
    # on-policy (μ = π), r = 1 for every loss here, so the loss is −Σ w·A (PPO clip and GLM-5: −Σ w·A·log π·r
    # differ only in the gradient's shape for GLM-5, whose value is −Σ w·A·log π)
    logprobs_BT = batch.rollout_logprobs_BT
    factor_BT = logprobs_BT if policy_loss == PolicyLoss.GLM5 else torch.ones_like(logprobs_BT)
    expected = -(batch.weights_BT * batch.advantages_BT * factor_BT).sum().item()
    assert whole.loss == pytest.approx(expected, abs=1e-5)
    splits = ((64, Layout.PACKED), (256, Layout.PACKED), (128, Layout.PADDED), (64, Layout.SHARED_PREFIX))
    for budget, layout in splits:
        split, grads = step_result(model, batch, algorithm=algorithm, token_budget=budget, layout=layout)
        assert split.micro_batches > 1
        assert split.loss == pytest.approx(whole.loss, rel=1e-5, abs=1e-7)
        assert split.grad_norm == pytest.approx(whole.grad_norm, rel=1e-5)
        for name, grad in grads.items():
            assert torch.allclose(grad, whole_grads[name], rtol=1e-4, atol=1e-8), name


def test_positive_advantage_sequence_gains_log_probability(model, make_trajectories):
    trajectories = make_trajectories([24, 24], ["g", "g"], [1.0, 0.0], seed=3, model=model)
    batch = TrainBatch.from_trajectories(trajectories, AlgorithmConfig())
    trainer = LocalTrainer(model, TrainerConfig(lr=1e-3, token_budget=64))

    def sequence_logprob(row: int) -> float:
        with torch.no_grad():
            stats = token_stats(model, batch.tokens_BT, batch.lengths_B)
        return float((stats.logprobs_SL * batch.loss_mask_BT)[row].sum())

    before = sequence_logprob(0), sequence_logprob(1)
    for _ in range(5):
        trainer.train_step(batch)
    after = sequence_logprob(0), sequence_logprob(1)
    assert after[0] > before[0] + 1.0  # 20 tokens: ≥ 0.05 nat per token more likely
    assert after[1] < before[1] - 1.0


@pytest.mark.parametrize(
    ("policy_loss", "flag"),
    [
        (PolicyLoss.DPPO_BINARY_TV, "dppo_masked"),
        (PolicyLoss.PPO_CLIP, "ppo_clipped"),
        (PolicyLoss.GLM5, "glm5_masked"),
    ],
)
def test_metrics_are_present_and_finite(model, make_trajectories, policy_loss, flag):
    algorithm = AlgorithmConfig(policy_loss=policy_loss)
    batch = TrainBatch.from_trajectories(make_trajectories(LENGTHS, GROUPS, REWARDS), algorithm)
    config = TrainerConfig(algorithm=algorithm, lr=1e-3, warmup_steps=2, token_budget=128)
    metrics = LocalTrainer(model, config).train_step(batch)
    flat = metrics.flat()
    assert all(math.isfinite(value) for value in flat.values()), flat
    assert set(flat) >= {
        "loss",
        "grad_norm",
        "entropy",
        "logprob_abs_diff_mean",
        "logprob_abs_diff_max",
        "reward_mean",
        "tokens_per_s",
        "forward_s",
        "backward_s",
        "optimizer_s",
        f"share/{flag}",
        "activity/dppo_masked_share",
        "activity/ratio_abs_dev_mean",
        "activity/weights_vs_token_mean",
    }
    assert metrics.step == 1
    assert metrics.lr == pytest.approx(0.5e-3)  # first of two warm-up steps
    assert metrics.tokens == sum(LENGTHS)
    assert metrics.loss_tokens == sum(LENGTHS) - 4 * len(LENGTHS)
    assert metrics.trajectories == 12 and metrics.groups_dropped == 0
    assert metrics.reward_mean == pytest.approx(sum(REWARDS) / 12)
    # on-policy: no train–inference mismatch, nothing masked or clipped; an untrained model is near uniform
    assert metrics.logprob_abs_diff_max < 1e-5
    assert metrics.token_shares[flag] == 0
    assert metrics.activity.dppo_masked_share == 0 and metrics.activity.ratio_abs_dev_mean < 1e-5
    assert metrics.activity.weights_vs_token_mean == batch.stats.weights_vs_token_mean > 0  # prompt_mean, uneven groups
    assert metrics.entropy == pytest.approx(math.log(300), abs=0.1)
    assert metrics.grad_norm > 0 and metrics.tokens_per_s > 0 and metrics.forward_s > 0


def test_schedules_by_hand():
    cosine = TrainerConfig(lr_schedule=LRSchedule.COSINE, warmup_steps=2, total_steps=6)
    # warm-up (k+1)/2, then 0.5·(1 + cos(π·(k−2)/4))
    assert [lr_multiplier(k, cosine) for k in range(8)] == pytest.approx(
        [0.5, 1.0, 1.0, 0.5 + 0.5 * math.cos(math.pi / 4), 0.5, 0.5 - 0.5 * math.cos(math.pi / 4), 0.0, 0.0]
    )
    floored = TrainerConfig(lr_schedule=LRSchedule.COSINE, total_steps=4, min_lr_ratio=0.2)
    assert lr_multiplier(4, floored) == pytest.approx(0.2)
    constant = TrainerConfig(warmup_steps=4)
    assert [lr_multiplier(k, constant) for k in (0, 3, 4, 100)] == [0.25, 1.0, 1.0, 1.0]


def test_trainer_follows_the_schedule(model, make_trajectories):
    batch = TrainBatch.from_trajectories(make_trajectories([8, 9], ["g", "g"], [1.0, 0.0]), AlgorithmConfig())
    config = TrainerConfig(lr=1e-4, lr_schedule=LRSchedule.COSINE, total_steps=2)
    trainer = LocalTrainer(model, config)
    assert [trainer.train_step(batch).lr for _ in range(3)] == pytest.approx([1e-4, 0.5e-4, 0.0])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"lr_schedule": "cosine"}, "needs total_steps > warmup_steps"),
        ({"lr_schedule": "cosine", "total_steps": 3, "warmup_steps": 3}, "needs total_steps > warmup_steps"),
        ({"betas": (0.9, 1.0)}, "betas must each lie in \\[0, 1\\)"),
        ({"token_budget": 0}, "token_budget"),
        ({"layout": "ragged"}, "layout"),
        ({"learning_rate": 1e-3}, "learning_rate"),
    ],
)
def test_bad_config_is_named(fields, message):
    with pytest.raises(ValidationError, match=message):
        TrainerConfig(**fields)


def test_out_of_vocabulary_tokens_are_refused(model, make_trajectories):
    trajectories = make_trajectories([8, 9], ["g", "g"], [1.0, 0.0])
    vocab = model.config.vocab_size
    trajectories[0].tokens[2] = vocab
    batch = TrainBatch.from_trajectories(trajectories, AlgorithmConfig())
    with pytest.raises(ValueError, match=rf"outside the model's vocabulary \[0, {vocab}\)"):
        LocalTrainer(model, TrainerConfig()).train_step(batch)


def test_engine_accepts_the_synced_weights(model, make_trajectories, policy):
    trainer = LocalTrainer(model, TrainerConfig(lr=1e-2))
    batch = TrainBatch.from_trajectories(make_trajectories([8, 9], ["g", "g"], [1.0, 0.0]), AlgorithmConfig())
    trainer.train_step(batch)
    state = trainer.state_dict_for_engine()
    assert "lm_head.weight" not in state  # tied to the embedding
    served = copy.deepcopy(policy[0])
    assert not torch.equal(served.model.embed_tokens.weight, model.model.embed_tokens.weight)
    with Engine(served) as engine:
        assert engine.update_weights(state) == 1
    for name, tensor in model.state_dict().items():
        assert torch.equal(served.state_dict()[name], tensor), name
    # a copy: the trainer's next step does not reach into the tensors handed out
    before = state["model.embed_tokens.weight"].clone()
    trainer.train_step(batch)
    assert torch.equal(state["model.embed_tokens.weight"], before)
