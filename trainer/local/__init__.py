"""The local torch trainer: mini-batches from trajectories, packed log-probs, AdamW steps, exact-resume checkpoints.

batch = TrainBatch.from_trajectories(trajectories, config.algorithm)   # filters, advantages, token weights
trainer = LocalTrainer(model, config)
metrics = trainer.train_step(batch)                                    # micro-batched, packed, one AdamW step
save_checkpoint("runs/x/checkpoints", trainer, step=1, data_cursor=16, tokenizer=tok)
"""

from envs.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "trainer.local.batch": ["BatchStats", "EmptyBatchError", "MicroBatch", "TrainBatch", "first_fit_decreasing"],
        "trainer.local.checkpoint": [
            "CheckpointError",
            "CheckpointInfo",
            "latest_checkpoint",
            "list_checkpoints",
            "load_checkpoint",
            "load_latest_checkpoint",
            "save_checkpoint",
        ],
        "trainer.local.config": ["Layout", "LRSchedule", "RetentionConfig", "TrainerConfig"],
        "trainer.local.logprobs": ["TokenStats", "token_stats"],
        "trainer.local.trainer": ["LocalTrainer", "StepMetrics", "lr_multiplier"],
    },
)
