"""PPO-ptx retention in the local trainer: the file, the per-step sample, and the gradient it adds to a step."""

import copy
import json

import pytest
import torch

from trainer.algorithms import AlgorithmConfig
from trainer.local.batch import TrainBatch, first_fit_decreasing
from trainer.local.config import RetentionConfig
from trainer.local.retention import RetentionFileError, RetentionSet, read_retention_file, step_sample
from trainer.local.trainer import LocalTrainer, TrainerConfig
from trainer.sft import masked_nll, pack
from trainer.traces import TokenizedTrace

LENGTHS = [30, 12, 21, 9]
GROUPS = ["a", "a", "b", "b"]
REWARDS = [1.0, 0.0, 0.0, 1.0]


def write_examples(path, examples, sources=None):
    sources = sources or ["mcq"] * len(examples)
    rows = zip(examples, sources, strict=True)
    lines = [json.dumps({"source": s, "tokens": e.tokens, "loss_mask": e.loss_mask}) for e, s in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def retention_examples(vocab: int, count: int = 6) -> list[TokenizedTrace]:
    """``count`` examples of 10-25 tokens: a prompt (no loss), then trained tokens."""
    generator = torch.Generator().manual_seed(7)
    examples = []
    for i in range(count):
        length, prompt = 10 + 3 * i, 4 + i % 3
        tokens = torch.randint(2, vocab, (length,), generator=generator).tolist()
        examples.append(TokenizedTrace(tokens, [0] * prompt + [1] * (length - prompt)))
    return examples


def test_the_file_is_read_in_order_and_a_bad_line_is_named(tmp_path):
    examples = [TokenizedTrace([5, 6, 7], [0, 1, 1]), TokenizedTrace([8, 9], [0, 1])]
    written = write_examples(tmp_path / "r.jsonl", examples, ["code_only", "mcq"])
    assert read_retention_file(written) == RetentionSet(examples, ["code_only", "mcq"])
    (tmp_path / "bad.jsonl").write_text('{"source": "mcq", "tokens": [1, 2], "loss_mask": [0, 1]}\n{"tokens": "x"}\n')
    with pytest.raises(RetentionFileError, match=r"bad.jsonl:2: not a retention example"):
        read_retention_file(tmp_path / "bad.jsonl")
    for text, why in (
        ('{"source": "mcq", "tokens": [1, 2], "loss_mask": [0]}', "one mask entry per token"),
        ('{"source": "mcq", "tokens": [1, 2], "loss_mask": [0, 0]}', "a trained token"),
        ('{"tokens": [1, 2], "loss_mask": [0, 1]}', "not a retention example"),
        ('{"source": 3, "tokens": [1, 2], "loss_mask": [0, 1]}', "source must be a format's name"),
        ("", "holds no example"),
    ):
        (tmp_path / "odd.jsonl").write_text(text)
        with pytest.raises(RetentionFileError, match=why):
            read_retention_file(tmp_path / "odd.jsonl")
    with pytest.raises(RetentionFileError, match="cannot be read"):
        read_retention_file(tmp_path / "missing.jsonl")


def test_each_step_draws_its_own_seeded_sample():
    sources = ["mcq"] * 50
    first = step_sample(sources, 16, seed=0, step=3)
    assert len(set(first)) == 16 and all(0 <= i < 50 for i in first)
    assert step_sample(sources, 16, seed=0, step=3) == first  # a resumed run draws step 3's examples again
    assert step_sample(sources, 16, seed=0, step=4) != first and step_sample(sources, 16, seed=1, step=3) != first
    assert step_sample(sources[:5], 16, seed=0, step=0) == [0, 1, 2, 3, 4]  # fewer examples than asked: all of them


def test_each_source_gets_an_equal_share_of_a_step_whatever_its_pool():
    """30 code-only examples (0-29), 2 terminal (30, 31), 8 MCQ (32-39). 9 a step: 3 each would do, but terminal has
    only 2, so both are dealt and its third place goes round: code-only and MCQ get 4 and 3, the extra one falling to
    whichever source deals first that step (code-only at step 0, terminal at 1, so MCQ then; MCQ at step 2)."""
    sources = ["code_only"] * 30 + ["terminal"] * 2 + ["mcq"] * 8

    def counts(indices):
        return [sum(sources[i] == s for i in indices) for s in ("code_only", "terminal", "mcq")]

    shares = [counts(step_sample(sources, 9, seed=0, step=step)) for step in range(3)]
    assert shares == [[4, 2, 3], [3, 2, 4], [3, 2, 4]]
    assert counts(step_sample(sources, 6, seed=0, step=0)) == [2, 2, 2]  # a uniform draw would give ~4.5, 0.3, 1.2
    assert {30, 31} <= set(step_sample(sources, 6, seed=0, step=5))  # every step replays the scarce format's examples
    assert counts(step_sample(sources, 40, seed=0, step=0)) == [30, 2, 8]  # more asked than held: all of them


def test_the_steps_examples_are_packed_within_the_token_budget():
    lengths = [5, 4, 3, 9, 2]
    bins = first_fit_decreasing(lengths, 9)  # what RetentionLoss packs its examples with
    assert bins == [[3], [0, 1], [2, 4]]  # a 9 alone; 5+4 = 9 fits; 3+2
    assert all(sum(lengths[i] for i in b) <= 9 for b in bins) and first_fit_decreasing(lengths, 100) == [
        [3, 0, 1, 2, 4]
    ]


def step_grads(model, batch, **config):
    trainer = LocalTrainer(copy.deepcopy(model), TrainerConfig(lr=1e-3, grad_clip=1e9, **config))
    metrics = trainer.train_step(batch)
    return metrics, {name: p.grad.clone() for name, p in trainer.model.named_parameters()}


def test_a_step_adds_gamma_times_the_examples_next_token_loss(model, make_trajectories, tmp_path):
    """grad(L_RL + γ·NLL) = grad(L_RL) + γ·grad(NLL), NLL the mean next-token loss of the step's sampled examples;
    cutting the examples into chunks (a small token budget) changes neither."""
    examples = retention_examples(model.config.vocab_size)
    path = write_examples(tmp_path / "retention.jsonl", examples)
    batch = TrainBatch.from_trajectories(make_trajectories(LENGTHS, GROUPS, REWARDS), AlgorithmConfig())
    plain, plain_grads = step_grads(model, batch)
    assert plain.retention_nll is None and "retention_nll" not in plain.flat()

    gamma, per_step = 0.5, 4
    chosen = [examples[i] for i in step_sample(["mcq"] * len(examples), per_step, seed=0, step=0)]
    reference = copy.deepcopy(model)
    reference.train()
    nll = masked_nll(reference, pack(chosen))
    nll.backward()
    nll = float(nll.detach())
    for budget in (10**6, 40):
        retention = RetentionConfig(path=str(path), coef=gamma, examples_per_step=per_step)
        mixed, grads = step_grads(model, batch, retention=retention, token_budget=budget)
        assert mixed.retention_nll == pytest.approx(nll, rel=1e-5)
        assert mixed.flat()["retention_nll"] == pytest.approx(nll, rel=1e-5) and mixed.retention_s > 0
        assert mixed.loss == pytest.approx(plain.loss, rel=1e-5, abs=1e-7)  # the RL loss is reported alone
        for name, param in reference.named_parameters():
            expected = plain_grads[name] + gamma * param.grad
            assert torch.allclose(grads[name], expected, rtol=1e-4, atol=1e-7), (budget, name)


def test_retention_keeps_the_examples_likely_while_rl_pulls_away(model, make_trajectories, tmp_path):
    """Twelve RL steps at a high learning rate raise the examples' loss; with γ = 1 it stays below where it started."""
    examples = retention_examples(model.config.vocab_size, count=4)
    path = write_examples(tmp_path / "retention.jsonl", examples)

    def examples_nll(trained) -> float:
        with torch.no_grad():
            return float(masked_nll(trained, pack(examples)))

    start = examples_nll(model)
    after = {}
    for gamma in (0.0, 1.0):
        retention = RetentionConfig(path=str(path), coef=gamma, examples_per_step=4) if gamma else None
        trainer = LocalTrainer(copy.deepcopy(model), TrainerConfig(lr=3e-3, retention=retention))
        for step in range(12):
            trajectories = make_trajectories(LENGTHS, GROUPS, REWARDS, seed=step, model=trainer.model)
            trainer.train_step(TrainBatch.from_trajectories(trajectories, AlgorithmConfig()))
        after[gamma] = examples_nll(trainer.model)
    assert after[1.0] < start < after[0.0], (start, after)


def test_the_config_refuses_what_cannot_work():
    with pytest.raises(ValueError, match="greater than 0"):
        RetentionConfig(path="r.jsonl", coef=0)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        RetentionConfig(path="r.jsonl", coef=1, examples_per_step=0)
