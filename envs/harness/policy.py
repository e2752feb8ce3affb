"""The harness a policy was trained with, stored beside its weights as ``harness.json``.

A policy is only as good as the prompt layout it learned: the tool listing (full JSON schemas, compact lines or bare
signatures), the system prompt, which apps' tools it saw, the context budget and the max tokens per turn. Every
policy folder the project writes (the bootstrapped base, each checkpoint's ``policy/``) carries them, so whatever
runs the policy later — an eval, the next training run — rolls out exactly as it was trained.

Two fields are stored off, since they belong to a run rather than to the policy: ``context_nudge`` (a training-time
harness change; evals run without the nudge) and ``seed`` (training derives one per group, an eval picks its own).

Example::

    write_policy_harness(policy_dir, PolicyHarness.from_training(config.harness, config.apps))
    settings = read_policy_harness(policy_dir)     # None for a folder without harness.json
    settings.harness.tool_listing, settings.apps
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.errors import RecipeError
from envs.files import atomic_write_text
from envs.harness.agent import HarnessConfig

HARNESS_FILE = "harness.json"


class HarnessFileError(RecipeError, ValueError):
    """A ``harness.json`` that does not hold a policy's harness settings."""


class PolicyHarness(BaseModel):
    """The harness settings of one policy: its ``HarnessConfig`` and the apps whose tools it saw (None: every app)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    apps: tuple[str, ...] | None = None
    harness: HarnessConfig
    terminal_max_tokens_per_turn: int | None = Field(None, ge=1)
    """The turn limit the policy was taught shell scripts with for the terminal harness (the local base's reference
    solutions run past its app-tool turns); None: ``harness.max_tokens_per_turn``."""

    def for_terminal(self) -> PolicyHarness:
        """These settings as the terminal harness runs them: its own turn limit, if the policy has one."""
        if self.terminal_max_tokens_per_turn is None:
            return self
        harness = self.harness.model_copy(update={"max_tokens_per_turn": self.terminal_max_tokens_per_turn})
        return self.model_copy(update={"harness": harness})

    @classmethod
    def from_training(
        cls, harness: HarnessConfig, apps: Sequence[str] | None, terminal_max_tokens_per_turn: int | None = None
    ) -> PolicyHarness:
        """What a training run's harness leaves its policy: the run-level knobs (nudge, seed) stored off, and the
        terminal turn limit it started from kept (RL on the app tools does not change what the terminal needs)."""
        stored = harness.model_copy(update={"context_nudge": False, "seed": None})
        return cls(
            apps=None if apps is None else tuple(apps),
            harness=stored,
            terminal_max_tokens_per_turn=terminal_max_tokens_per_turn,
        )


def read_policy_harness(policy_dir: Path) -> PolicyHarness | None:
    """The settings in ``<policy_dir>/harness.json``; None when there is none. A malformed file raises
    ``HarnessFileError`` (a ``ValueError``) naming the file and the field."""
    path = Path(policy_dir) / HARNESS_FILE
    if not path.is_file():
        return None
    try:
        return PolicyHarness.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc']) or '(file)'}: {issue['msg']}" for issue in error.errors()
        )
        raise HarnessFileError(f"{path} is not a policy's harness settings: {problems}") from None


def write_policy_harness(policy_dir: Path, settings: PolicyHarness) -> Path:
    """Write ``<policy_dir>/harness.json`` atomically and return its path."""
    path = Path(policy_dir) / HARNESS_FILE
    atomic_write_text(path, settings.model_dump_json(indent=2) + "\n")
    return path
