"""Checkpoints: an interrupted run resumes bit-exactly; atomic writes, keep-last-K, clear errors."""

import copy
import json
import random

import numpy as np
import pytest
import torch

from envs.harness.agent import HarnessConfig
from envs.harness.chat import ToolListing
from envs.harness.policy import HARNESS_FILE, PolicyHarness, read_policy_harness
from trainer.local.batch import TrainBatch
from trainer.local.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from trainer.local.trainer import LocalTrainer, LRSchedule, TrainerConfig
from trainer.model import load_policy

CONFIG = TrainerConfig(lr=1e-3, lr_schedule=LRSchedule.COSINE, warmup_steps=1, total_steps=10, token_budget=48, seed=7)


@pytest.fixture
def batches(make_trajectories):
    groups, rewards = ["a", "a", "b", "b"], [1.0, 0.0, 0.3, 0.8]
    return [
        TrainBatch.from_trajectories(make_trajectories([20, 14, 31, 9], groups, rewards, seed=s), CONFIG.algorithm)
        for s in range(4)
    ]


def test_interrupted_run_resumes_exactly(model, tokenizer, batches, tmp_path):
    k = 3
    uninterrupted = LocalTrainer(model, CONFIG)
    for step in range(k):
        uninterrupted.train_step(batches[step])
    save_checkpoint(tmp_path, uninterrupted, k, data_cursor={"epoch": 0, "index": 12}, tokenizer=tokenizer)
    draws_after_save = (random.random(), np.random.rand(), torch.rand(3))
    expected = uninterrupted.train_step(batches[k])

    random.seed(0), np.random.seed(0), torch.manual_seed(0)  # the new "process" starts with other RNG states
    restored_model, _ = load_policy(latest_checkpoint(tmp_path) / "policy")
    resumed = LocalTrainer(restored_model, CONFIG)
    info = load_checkpoint(latest_checkpoint(tmp_path), resumed)
    assert (info.step, info.data_cursor, resumed.step) == (k, {"epoch": 0, "index": 12}, k)
    draws = (random.random(), np.random.rand(), torch.rand(3))
    assert draws[:2] == draws_after_save[:2] and torch.equal(draws[2], draws_after_save[2])
    got = resumed.train_step(batches[k])

    assert got.loss == expected.loss
    assert got.lr == expected.lr
    assert got.grad_norm == expected.grad_norm
    for (name, a), b in zip(uninterrupted.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b), name


def test_resume_without_the_optimizer_state_would_differ(model, tokenizer, batches, tmp_path):
    """The exactness test above can fail: a fresh AdamW on the restored weights takes a different step."""
    trainer = LocalTrainer(model, CONFIG)
    for step in range(2):
        trainer.train_step(batches[step])
    path = save_checkpoint(tmp_path, trainer, 2, data_cursor=8, tokenizer=tokenizer)
    expected = trainer.train_step(batches[2])
    fresh = LocalTrainer(load_policy(path / "policy")[0], CONFIG)
    assert fresh.train_step(batches[2]).lr != expected.lr
    assert not torch.equal(fresh.model.model.norm.weight, trainer.model.model.norm.weight)


def test_keeps_the_last_k_and_writes_atomically(model, tokenizer, tmp_path):
    trainer = LocalTrainer(model, CONFIG)
    for step in (5, 10, 15, 20):
        save_checkpoint(
            tmp_path, trainer, step, data_cursor=step * 4, extra={"note": "x"}, tokenizer=tokenizer, keep_last=2
        )
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000015", "step-00000020"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000015", "step-00000020"]  # no temp left behind
    meta = json.loads((tmp_path / "step-00000020" / "meta.json").read_text())
    assert meta["step"] == 20 and meta["data_cursor"] == 80 and meta["extra"] == {"note": "x"}
    assert meta["trainer_config"]["lr_schedule"] == "cosine"
    assert (tmp_path / "step-00000020" / "policy" / "model.safetensors").is_file()
    # an unfinished save (hidden temp folder) is never listed as a checkpoint
    (tmp_path / ".step-00000025-abc").mkdir()
    assert latest_checkpoint(tmp_path).name == "step-00000020"
    assert latest_checkpoint(tmp_path / "none") is None


def test_the_policy_folder_carries_the_loops_harness(model, tokenizer, tmp_path):
    trainer = LocalTrainer(model, CONFIG)
    settings = PolicyHarness(apps=("sheets",), harness=HarnessConfig(tool_listing=ToolListing.COMPACT, max_turns=3))
    path = save_checkpoint(tmp_path, trainer, 1, data_cursor=0, tokenizer=tokenizer, harness=settings)
    assert read_policy_harness(path / "policy") == settings
    bare = save_checkpoint(tmp_path, trainer, 2, data_cursor=0, tokenizer=tokenizer)
    assert not (bare / "policy" / HARNESS_FILE).exists()


def test_bad_arguments_are_named(model, tokenizer, tmp_path):
    trainer = LocalTrainer(model, CONFIG)
    with pytest.raises(ValueError, match="must be JSON values"):
        save_checkpoint(tmp_path, trainer, 1, data_cursor=object(), tokenizer=tokenizer)
    with pytest.raises(ValueError, match="keep_last must be ≥ 1"):
        save_checkpoint(tmp_path, trainer, 1, data_cursor=0, tokenizer=tokenizer, keep_last=0)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "step-00000001").mkdir()
    with pytest.raises(FileNotFoundError, match=r"not a complete checkpoint: it lacks \['policy', 'trainer_state.pt'"):
        load_checkpoint(tmp_path / "step-00000001", LocalTrainer(copy.deepcopy(model), CONFIG))
