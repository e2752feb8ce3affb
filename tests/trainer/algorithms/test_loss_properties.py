"""Property tests (hypothesis) of aggregation + policy loss: split invariance, equal group weight, masking."""

import itertools
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.algorithms import Aggregation, AlgorithmConfig, PolicyLoss, TisMode, policy_loss, token_weights

F64 = torch.float64
SETTINGS = settings(max_examples=60, deadline=None)


def make_batch(seed: int, batch_size: int, length: int, num_groups: int) -> dict:
    """Random mini-batch: every sequence has ≥ 1 loss token; π, μ, π_old within a few nats of each other."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch_size, length, generator=gen) < 0.6
    mask[torch.arange(batch_size), torch.randint(length, (batch_size,), generator=gen)] = True
    rollout = -3 * torch.rand(batch_size, length, generator=gen, dtype=F64) - 0.01
    logprobs = (rollout + 0.6 * torch.randn(batch_size, length, generator=gen, dtype=F64)).clamp(max=-1e-3)
    old = (rollout + 0.01 * torch.randn(batch_size, length, generator=gen, dtype=F64)).clamp(max=-1e-3)
    advantages_B = torch.randn(batch_size, generator=gen, dtype=F64)
    return {
        "mask": mask,
        "group_ids": torch.randint(num_groups, (batch_size,), generator=gen).tolist(),
        "logprobs": logprobs,
        "rollout": rollout,
        "old": old,
        "advantages": advantages_B[:, None] * mask,
    }


def configs() -> st.SearchStrategy[AlgorithmConfig]:
    def build(loss: PolicyLoss, aggregation: Aggregation, tis: TisMode, geometric: bool) -> AlgorithmConfig:
        return AlgorithmConfig(
            policy_loss=loss,
            aggregation=aggregation,
            token_sum_norm_len=8,
            tis_mode=tis if loss == PolicyLoss.PPO_CLIP else TisMode.NONE,
            geometric_mask=geometric,
            # a wide geometric band so that both kept and dropped sequences occur
            geometric_mask_low=0.97,
            geometric_mask_high=1.03,
        )

    return st.builds(
        build, st.sampled_from(PolicyLoss), st.sampled_from(Aggregation), st.sampled_from(TisMode), st.booleans()
    )


def loss_and_grad(batch: dict, weights: torch.Tensor, config: AlgorithmConfig, rows: slice) -> tuple:
    logprobs = batch["logprobs"][rows].clone().requires_grad_(True)
    loss, _ = policy_loss(
        logprobs,
        batch["rollout"][rows],
        batch["advantages"][rows],
        batch["mask"][rows],
        weights[rows],
        config,
        old_logprobs_BT=batch["old"][rows] if config.policy_loss == PolicyLoss.PPO_CLIP else None,
    )
    loss.backward()
    return loss.detach(), logprobs.grad


@SETTINGS
@given(
    seed=st.integers(0, 2**31),
    batch_size=st.integers(1, 7),
    length=st.integers(1, 6),
    num_groups=st.integers(1, 3),
    config=configs(),
    data=st.data(),
)
def test_micro_batch_split_invariance(seed, batch_size, length, num_groups, config, data):
    batch = make_batch(seed, batch_size, length, num_groups)
    weights = token_weights(batch["mask"], batch["group_ids"], config.aggregation, config.token_sum_norm_len).to(F64)
    full_loss, full_grad = loss_and_grad(batch, weights, config, slice(None))

    cuts = sorted(data.draw(st.sets(st.integers(1, batch_size - 1), max_size=3)) if batch_size > 1 else set())
    bounds = [0, *cuts, batch_size]
    split_loss = torch.zeros((), dtype=F64)
    split_grad = torch.zeros_like(full_grad)
    for start, stop in itertools.pairwise(bounds):
        loss, grad = loss_and_grad(batch, weights, config, slice(start, stop))
        split_loss += loss
        split_grad[start:stop] = grad

    torch.testing.assert_close(split_loss, full_loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(split_grad, full_grad, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(seed=st.integers(0, 2**31), batch_size=st.integers(1, 9), length=st.integers(1, 6), data=st.data())
def test_prompt_mean_gives_each_group_weight_one_over_p(seed, batch_size, length, data):
    group_ids = data.draw(st.lists(st.sampled_from("abcd"), min_size=batch_size, max_size=batch_size))
    mask = make_batch(seed, batch_size, length, 1)["mask"]
    weights = token_weights(mask, group_ids, Aggregation.PROMPT_MEAN)
    groups = sorted(set(group_ids))
    for group in groups:
        rows = [i for i, g in enumerate(group_ids) if g == group]
        assert math.isclose(weights[rows].sum().item(), 1 / len(groups), rel_tol=1e-5)
        # within a group every loss token weighs the same, whatever sequence it is in
        assert torch.allclose(weights[rows][mask[rows]], weights[rows][mask[rows]][0])
    assert (weights[~mask] == 0).all()


@SETTINGS
@given(seed=st.integers(0, 2**31), batch_size=st.integers(1, 6), length=st.integers(2, 6), config=configs())
def test_masked_tokens_never_contribute(seed, batch_size, length, config):
    batch = make_batch(seed, batch_size, length, 2)
    weights = token_weights(batch["mask"], batch["group_ids"], config.aggregation, config.token_sum_norm_len).to(F64)
    loss, grad = loss_and_grad(batch, weights, config, slice(None))

    # Garbage everywhere outside the loss mask: huge and infinite log-probs, NaN advantages.
    gen = torch.Generator().manual_seed(seed + 1)
    outside = ~batch["mask"]
    garbage = dict(batch)
    for key, fill in (("logprobs", -1e4), ("rollout", float("-inf")), ("old", 50.0), ("advantages", float("nan"))):
        noise = fill * torch.rand(batch_size, length, generator=gen, dtype=F64).add(0.5)
        garbage[key] = torch.where(outside, noise, batch[key])
    garbage_loss, garbage_grad = loss_and_grad(garbage, weights, config, slice(None))

    torch.testing.assert_close(garbage_loss, loss, rtol=0, atol=0)
    torch.testing.assert_close(garbage_grad, grad, rtol=0, atol=0)
    assert (grad[outside] == 0).all()


def rule_masks(p_pi: float, p_mu: float, advantage: float, delta_low: float, delta_high: float, kind: str) -> bool:
    """The RECIPE's DPPO rule, written independently in plain floats."""
    diff = p_pi - p_mu
    if kind == "tv":
        return (advantage > 0 and diff > delta_high) or (advantage < 0 and -diff > delta_low)
    kl = p_mu * math.log(p_mu / p_pi) + (1 - p_mu) * math.log((1 - p_mu) / (1 - p_pi))
    return (advantage > 0 and diff > 0 and kl > delta_high) or (advantage < 0 and diff < 0 and kl > delta_low)


probability = st.floats(0.01, 0.99)
advantage = st.floats(-2, 2).filter(lambda a: abs(a) > 1e-3)


@SETTINGS
@given(
    tokens=st.lists(st.tuples(probability, probability, advantage), min_size=1, max_size=12),
    kind=st.sampled_from(["tv", "kl"]),
    delta_low=st.floats(0.01, 0.5),
    delta_high=st.floats(0.01, 0.5),
)
def test_dppo_masks_exactly_the_tokens_the_rule_names(tokens, kind, delta_low, delta_high):
    loss_name = PolicyLoss.DPPO_BINARY_TV if kind == "tv" else PolicyLoss.DPPO_BINARY_KL
    config = AlgorithmConfig(policy_loss=loss_name, dppo_delta_low=delta_low, dppo_delta_high=delta_high)
    p_pi = torch.tensor([[t[0] for t in tokens]], dtype=F64)
    p_mu = torch.tensor([[t[1] for t in tokens]], dtype=F64)
    advantages = torch.tensor([[t[2] for t in tokens]], dtype=F64)
    logprobs = p_pi.log().requires_grad_(True)
    mask = torch.ones_like(p_pi, dtype=torch.bool)
    loss, metrics = policy_loss(logprobs, p_mu.log(), advantages, mask, mask.to(F64), config)
    loss.backward()

    expected_masked = [rule_masks(pi, mu, a, delta_low, delta_high, kind) for pi, mu, a in tokens]
    # ∂ℓ/∂log π = −(1 − masked)·r·A, r = π/μ
    keep = torch.tensor([[0.0 if m else 1.0 for m in expected_masked]], dtype=F64)
    torch.testing.assert_close(logprobs.grad, -keep * (p_pi / p_mu) * advantages)
    assert math.isclose(metrics["dppo_masked"], sum(expected_masked) / len(tokens))
