"""The local torch trainer: mini-batches from trajectories, packed log-probs, AdamW steps, exact-resume checkpoints.

batch = TrainBatch.from_trajectories(trajectories, config.algorithm)   # filters, advantages, token weights
trainer = LocalTrainer(model, config)
metrics = trainer.train_step(batch)                                    # micro-batched, packed, one AdamW step
save_checkpoint("runs/x/checkpoints", trainer, step=1, data_cursor=16, tokenizer=tok)
"""

from trainer.local.batch import BatchStats, EmptyBatchError, MicroBatch, TrainBatch, first_fit_decreasing
from trainer.local.checkpoint import (
    CheckpointError,
    CheckpointInfo,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_latest_checkpoint,
    save_checkpoint,
)
from trainer.local.logprobs import Layout, TokenStats, token_stats
from trainer.local.trainer import LocalTrainer, LRSchedule, StepMetrics, TrainerConfig, lr_multiplier

__all__ = [
    "BatchStats",
    "CheckpointError",
    "CheckpointInfo",
    "EmptyBatchError",
    "LRSchedule",
    "Layout",
    "LocalTrainer",
    "MicroBatch",
    "StepMetrics",
    "TokenStats",
    "TrainBatch",
    "TrainerConfig",
    "first_fit_decreasing",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_latest_checkpoint",
    "lr_multiplier",
    "save_checkpoint",
    "token_stats",
]
