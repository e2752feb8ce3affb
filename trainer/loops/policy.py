"""The policy a loop trains: the trainer resumed from the run's newest loadable checkpoint under
``<out_dir>/checkpoints``, the weights its engine starts from (``engine_weights``: a copy of their own, see
``trainer.loops.generation``), and where a loop writes its own checkpoints (``LoopCheckpoints``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import JsonValue
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from envs.harness.policy import PolicyHarness, read_policy_harness
from trainer.engine import Engine, EngineConfig
from trainer.local import LocalTrainer, TrainerConfig, load_latest_checkpoint, save_checkpoint
from trainer.local.checkpoint import POLICY_DIR, CheckpointInfo
from trainer.model import load_policy, save_policy

CHECKPOINTS = "checkpoints"


def open_trainer(
    policy_dir: Path, trainer_config: TrainerConfig, out_dir: Path
) -> tuple[LocalTrainer, PreTrainedTokenizerBase, CheckpointInfo | None]:
    """A trainer on the policy, restored from the newest checkpoint under ``out_dir`` that loads (a damaged one is
    moved aside with a warning: ``load_latest_checkpoint``), when there is one."""
    model: PreTrainedModel
    model, tokenizer = load_policy(policy_dir)
    trainer = LocalTrainer(model, trainer_config)
    return trainer, tokenizer, load_latest_checkpoint(out_dir / CHECKPOINTS, trainer)


def engine_weights(policy_dir: Path, resumed: CheckpointInfo | None) -> Path:
    """Where the engine loads from: the checkpoint's policy when resuming, else the base policy."""
    return resumed.path / POLICY_DIR if resumed is not None else policy_dir


def open_engine(weights: Path, engine_config: EngineConfig, weight_noise: float = 0.0) -> Engine:
    """An engine on its own copy of the weights in ``weights`` (a policy folder); ``weight_noise`` > 0 perturbs them
    (the gate matrix's defect, ``LoopConfig.engine_weight_noise``)."""
    model, tokenizer = load_policy(weights)
    if weight_noise > 0:
        perturb_weights_(model, weight_noise)
    return Engine(model, tokenizer, engine_config)


@torch.no_grad()
def perturb_weights_(model: torch.nn.Module, relative_std: float, seed: int = 0) -> None:
    """In place, every floating-point tensor W ← W + ε · rms(W), ε ~ N(0, relative_std²) elementwise (seeded), so
    each tensor moves by the same share of its own size whatever its scale (rms, not std: norm weights are all 1)."""
    generator = torch.Generator().manual_seed(seed)
    seen: set[int] = set()  # a tied lm_head is the embedding's tensor: perturb it once
    for tensor in model.state_dict().values():
        if tensor.is_floating_point() and tensor.numel() > 1 and tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32)
            tensor.add_((noise * relative_std * tensor.float().square().mean().sqrt()).to(tensor.dtype))


def perturbed_policy(source: Path, destination: Path, relative_std: float, seed: int = 0) -> Path:
    """A copy of the policy folder ``source`` at ``destination`` with its weights perturbed (``perturb_weights_``),
    carrying the same harness: the gate matrix's damaged policy (``Defect.DAMAGED_POLICY``)."""
    model, tokenizer = load_policy(source)
    perturb_weights_(model, relative_std, seed)
    return save_policy(model, tokenizer, destination, harness=read_policy_harness(source))


@dataclass(frozen=True)
class LoopCheckpoints:
    """How a loop run checkpoints: under ``<out_dir>/checkpoints``, tagged with the loop's kind, every policy folder
    carrying the harness it was trained with (``harness.json``)."""

    out_dir: Path
    kind: str
    harness: PolicyHarness

    def save(self, trainer: LocalTrainer, tokenizer: PreTrainedTokenizerBase, step: int, cursor: JsonValue) -> None:
        root = self.out_dir / CHECKPOINTS
        save_checkpoint(root, trainer, step, cursor, {"kind": self.kind}, tokenizer=tokenizer, harness=self.harness)
