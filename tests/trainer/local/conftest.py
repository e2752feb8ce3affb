"""Shared fixtures: a tiny Qwen3 policy (2 layers, hidden 64, head_dim 64, vocab 300) and a trajectory factory.

``make_trajectories`` builds trajectories of given lengths (a prompt of ``prompt_len`` tokens — one per group with
``shared_prompts`` — then sampled tokens under the loss mask) whose rollout log-probs μ are the given model's own,
i.e. exactly on-policy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import pytest
import torch
from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM

from envs.types import StopReason, Trajectory
from tests.trainer.torch_threads import one_torch_thread  # noqa: F401  (autouse: every test here)
from trainer.local.logprobs import token_stats
from trainer.model import TinyModelSpec, bootstrap_policy

CORPUS = [f"deal {i}: the board approved {i * 3 % 50} shares at {i % 9}.5 usd" for i in range(300)]
SPEC = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, head_dim=64, intermediate=128, max_position=512)

MakeTrajectories = Callable[..., list[Trajectory]]


@pytest.fixture(scope="session")
def policy() -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerBase]:
    return bootstrap_policy(CORPUS, SPEC, vocab_size=300)


@pytest.fixture
def model(policy) -> Qwen3ForCausalLM:
    """A fresh copy of the tiny policy per test: training mutates it."""
    return copy.deepcopy(policy[0])


@pytest.fixture
def tokenizer(policy) -> PreTrainedTokenizerBase:
    return policy[1]


@pytest.fixture(scope="session")
def make_trajectories(policy) -> MakeTrajectories:
    def make(
        lengths: Sequence[int],
        group_ids: Sequence[str],
        rewards: Sequence[float],
        *,
        prompt_len: int = 4,
        stop_reasons: Sequence[StopReason] | None = None,
        seed: int = 0,
        model: Qwen3ForCausalLM | None = None,
        shared_prompts: bool = False,
    ) -> list[Trajectory]:
        scorer = policy[0] if model is None else model
        generator = torch.Generator().manual_seed(seed)
        vocab = scorer.config.vocab_size
        out = []
        prompts: dict[str, torch.Tensor] = {}
        for i, (length, group_id, reward) in enumerate(zip(lengths, group_ids, rewards, strict=True)):
            tokens = torch.randint(2, vocab, (length,), generator=generator)
            if shared_prompts:  # a group's samples continue one prompt, as GRPO's do
                tokens[:prompt_len] = prompts.setdefault(group_id, tokens[:prompt_len].clone())[: len(tokens)]
            with torch.no_grad():
                logprobs = token_stats(scorer, tokens[None], torch.tensor([length])).logprobs_SL[0]
            mask = [int(t >= prompt_len) for t in range(length)]
            out.append(
                Trajectory(
                    task_id=f"task-{group_id}",
                    group_id=group_id,
                    sample_index=i,
                    tokens=tokens.tolist(),
                    loss_mask=mask,
                    logprobs=[lp * m for lp, m in zip(logprobs.tolist(), mask, strict=True)],
                    prompt_len=prompt_len,
                    reward=reward,
                    stop_reason=StopReason.STOP if stop_reasons is None else stop_reasons[i],
                )
            )
        return out

    return make
