"""What every part of the profile shares: its error, the stage names, the limits on values, the section base."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.errors import RecipeError
from envs.harness.config import HarnessConfig

PROFILES_DIR = Path(__file__).resolve().parents[2] / "deployments" / "profiles"


class ProfileError(RecipeError, ValueError):
    """A profile that does not validate; the message names the file, each bad field's path and the reason."""


class StageName(StrEnum):
    """The recipe's stages, in pipeline order."""

    DERISK = "derisk"
    TITO = "tito"
    SYSTEMS = "systems"
    OVERFIT = "overfit"
    ABLATIONS = "ablations"
    HERO = "hero"
    TRANSFER = "transfer"

    @property
    def index(self) -> int:
        """1-based position in the pipeline."""
        return list(StageName).index(self) + 1

    @property
    def folder(self) -> str:
        """The stage's folder under the run (``4-overfit``) and the prefix of its artifact keys."""
        return f"{self.index}-{self.value}"


# Plausible ranges: generous enough for the largest cluster run, tight enough that a slip (a few zeros too many, NaN)
# fails at load with its field path instead of hours into a run. Every float is finite (``allow_inf_nan=False``).
MAX_SEED = 2**63
"""Seeds are 0 ≤ seed < 2**63: every consumer (random, numpy, torch, vLLM) takes a signed 64-bit one."""
MAX_STEPS = 10**6
"""Steps, epochs, passes, samples, turns, tasks and intervals counted in them."""
MAX_PARALLEL = 65_536
"""Workers, rollouts in flight (or started per second), KV slots, sandboxes, nodes, engines, parallel degrees."""
MAX_WORLDS_PER_DOMAIN = 1000
"""Each world is generated on disk."""
MAX_TIMEOUT_S = 30 * 86_400.0
"""Timeouts: a month (a cluster job's default is a week)."""
MAX_GIB = 65_536.0
"""Memory of one GPU or one host."""
MAX_TOKENS = 2**24
"""Context windows and token budgets."""
MAX_BAR = 2.0
"""A bar on a difference of rewards or Pass@1 (each in [0, 1]) lies in ±2: a confidence bound can pass ±1 on few
tasks, and the smoke profile's plumbing-only bars sit at ±2."""
PROFILE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""A profile's name starts its run ids (``tasks.run_store.RUN_ID``), so it is a plain folder name."""

Seed = Annotated[int, Field(ge=0, lt=MAX_SEED)]
Seconds = Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)]
RewardBar = Annotated[float, Field(ge=-MAX_BAR, le=MAX_BAR)]
Resources = dict[str, Annotated[float, Field(ge=0)]]
"""Ray resources by name (``{"GPU": 8}``)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)


def valid_harness_changes(changes: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``changes`` when each is a ``HarnessConfig`` field with a valid value; else a ValueError naming each bad one."""
    try:
        HarnessConfig(**changes)
    except ValidationError as error:
        raise ValueError(f"{where}{_messages(error)}") from None
    return changes


def _messages(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in error.errors())
