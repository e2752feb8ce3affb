"""Local inference engine: token in / token out, continuous batching, vLLM-compatible HTTP (see server.py)."""

from trainer.engine.engine import Engine, EngineConfig
from trainer.engine.types import Completion, EngineRequestError, FinishReason, PauseMode, SamplingParams

__all__ = ["Completion", "Engine", "EngineConfig", "EngineRequestError", "FinishReason", "PauseMode", "SamplingParams"]
