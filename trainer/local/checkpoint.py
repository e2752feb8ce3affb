"""Checkpoints of a ``LocalTrainer`` that resume exactly: same next-step loss and weights as a run never stopped.

Layout of one checkpoint, ``<root>/step-<step:08d>/``:

    policy/              HF folder written by ``save_policy`` (config, safetensors weights, tokenizer, and the
                         loop's harness settings as harness.json): servable by the engine, loadable with
                         ``load_policy`` and evaluable with the harness it was trained with, on its own
    trainer_state.pt     AdamW state, LR-scheduler state, python / numpy / torch (and CUDA) RNG states
    meta.json            step, data cursor, caller's extra, trainer config (for the audit trail)

A checkpoint is written into a hidden sibling temp folder, fsynced (every file and folder: a crash after the rename
never leaves a complete-looking checkpoint of empty files) and renamed into place (``envs.files.staged_dir``), so a
reader (or a resume after a crash) never sees half of one; after the rename only the newest ``keep_last``
checkpoints are kept.

Loading reads and checks every file before it touches the trainer; a file that is truncated or damaged raises a
``CheckpointError`` naming it. ``load_latest_checkpoint`` resumes from the newest checkpoint that loads: a damaged one
is moved aside (``damaged-step-<step>``, so pruning never keeps it over good ones) with a warning, and the one before
it is tried.

    save_checkpoint("runs/x/checkpoints", trainer, step=5, data_cursor=80, tokenizer=tok)
    info = load_latest_checkpoint("runs/x/checkpoints", trainer)   # weights, optimizer, RNGs; None when none
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from pickle import UnpicklingError
from typing import Any

import numpy as np
import torch
from pydantic import JsonValue
from safetensors import SafetensorError, safe_open
from transformers import PreTrainedTokenizerBase

from envs.errors import RecipeError
from envs.files import staged_dir
from envs.harness.policy import PolicyHarness
from envs.jsonio import JsonError, parse_json
from trainer.local.trainer import LocalTrainer
from trainer.model import load_policy, save_policy

POLICY_DIR = "policy"
STATE_FILE = "trainer_state.pt"
META_FILE = "meta.json"
CHECKPOINT_NAME = re.compile(r"^step-(\d+)$")
DAMAGED_PREFIX = "damaged-"

log = logging.getLogger(__name__)


class CheckpointError(RecipeError):
    """A checkpoint that cannot be loaded; the message names the checkpoint and the damaged file."""


class IncompleteCheckpointError(CheckpointError, FileNotFoundError):
    """A checkpoint folder without one of its parts (policy/, trainer_state.pt, meta.json)."""


@dataclass(frozen=True)
class CheckpointInfo:
    """Where a checkpoint is and the bookkeeping the caller stored with it."""

    path: Path
    step: int
    data_cursor: JsonValue
    extra: dict[str, JsonValue]


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def list_checkpoints(root: str | os.PathLike[str]) -> list[Path]:
    """Complete checkpoints under ``root``, oldest step first (temp folders of unfinished saves are not listed)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := CHECKPOINT_NAME.match(p.name))]
    return [path for _, path in sorted(found)]


def latest_checkpoint(root: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint under ``root``, or None when there is none."""
    checkpoints = list_checkpoints(root)
    return checkpoints[-1] if checkpoints else None


def save_checkpoint(
    root: str | os.PathLike[str],
    trainer: LocalTrainer,
    step: int,
    data_cursor: JsonValue,
    extra: dict[str, JsonValue] | None = None,
    *,
    tokenizer: PreTrainedTokenizerBase,
    keep_last: int = 3,
    harness: PolicyHarness | None = None,
) -> Path:
    """Write ``<root>/step-<step>/`` atomically, then delete all but the newest ``keep_last`` checkpoints.

    ``data_cursor`` (where the data stream resumes) and ``extra`` must be JSON values; ``harness`` goes into the
    policy folder as ``harness.json``. Returns the checkpoint path.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be ≥ 1, got {keep_last}")
    if step < 0:
        raise ValueError(f"step must be ≥ 0, got {step}")
    meta = {
        "step": step,
        "data_cursor": data_cursor,
        "extra": extra or {},
        "trainer_config": trainer.config.model_dump(mode="json"),
    }
    try:
        meta_text = json.dumps(meta, indent=2)
    except TypeError as error:
        raise ValueError(f"data_cursor and extra must be JSON values: {error}") from None

    root = Path(root)
    target = root / checkpoint_name(step)
    with staged_dir(target) as tmp:  # fsynced before the name says "complete", and the rename made durable
        save_policy(trainer.model, tokenizer, tmp / POLICY_DIR, harness=harness)
        state = {
            "optimizer": trainer.optimizer.state_dict(),
            "scheduler": trainer.scheduler.state_dict(),
            "rng": _rng_states(),
        }
        torch.save(state, tmp / STATE_FILE)
        (tmp / META_FILE).write_text(meta_text)
    for old in list_checkpoints(root)[:-keep_last]:
        shutil.rmtree(old)
    return target


def load_checkpoint(path: str | os.PathLike[str], trainer: LocalTrainer) -> CheckpointInfo:
    """Restore weights, optimizer, scheduler, RNG states and step count of ``trainer`` from checkpoint ``path``.

    ``trainer`` must have been built with a model of the same architecture and the same parameter order (e.g.
    ``LocalTrainer(load_policy(path / "policy")[0], config)``). Every file is read and checked first: a missing part
    raises ``IncompleteCheckpointError``, a truncated or damaged file a ``CheckpointError`` naming it, and in both
    cases ``trainer`` is left untouched.
    """
    path = Path(path)
    missing = [name for name in (POLICY_DIR, STATE_FILE, META_FILE) if not (path / name).exists()]
    if missing:
        raise IncompleteCheckpointError(f"{path} is not a complete checkpoint: it lacks {missing}")
    with _reading(path / META_FILE):
        meta = parse_json((path / META_FILE).read_text(encoding="utf-8"))
        step, data_cursor, extra = int(meta["step"]), meta["data_cursor"], dict(meta["extra"])
    for weights in sorted((path / POLICY_DIR).glob("*.safetensors")):
        with _reading(weights), safe_open(weights, "pt"):  # checks the header covers the file: truncation, named
            pass
    with _reading(path / POLICY_DIR):
        saved_model, _ = load_policy(path / POLICY_DIR, dtype=trainer.model.dtype)
    with _reading(path / STATE_FILE):
        state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
        optimizer, scheduler, rng = state["optimizer"], state["scheduler"], state["rng"]
    with torch.no_grad():
        trainer.model.load_state_dict(saved_model.state_dict())
    trainer.optimizer.load_state_dict(optimizer)
    trainer.scheduler.load_state_dict(scheduler)
    _restore_rng_states(rng)
    trainer.step = step
    return CheckpointInfo(path=path, step=step, data_cursor=data_cursor, extra=extra)


def load_latest_checkpoint(root: str | os.PathLike[str], trainer: LocalTrainer) -> CheckpointInfo | None:
    """Restore ``trainer`` from the newest checkpoint under ``root`` that loads; None when there is none.

    A checkpoint that fails (``CheckpointError``: truncated, damaged, incomplete) is renamed ``damaged-step-<step>``
    (kept for inspection, never listed or pruned in favour of it again) with a warning, and the previous one is tried;
    when every checkpoint fails, a ``CheckpointError`` names them all.
    """
    failures: list[str] = []
    for path in reversed(list_checkpoints(root)):
        try:
            return load_checkpoint(path, trainer)
        except CheckpointError as error:
            aside = path.with_name(f"{DAMAGED_PREFIX}{path.name}")
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(path, aside)
            log.warning("%s; moved it aside to %s and resuming from the checkpoint before it", error, aside.name)
            failures.append(str(error))
    if failures:
        raise CheckpointError(f"no checkpoint under {root} can be loaded: {'; '.join(failures)}")
    return None


@contextlib.contextmanager
def _reading(file: Path) -> Iterator[None]:
    """Turn any failure to read ``file`` (a truncated zip or safetensors, bad JSON, a missing key) into a
    ``CheckpointError`` that names it."""
    try:
        yield
    except CheckpointError:
        raise
    except (
        JsonError,
        SafetensorError,
        UnpicklingError,
        KeyError,
        TypeError,
        ValueError,
        OSError,
        RuntimeError,
        EOFError,
    ) as error:
        reason = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        raise CheckpointError(f"checkpoint file {file} is truncated or damaged ({reason})") from error


def _rng_states() -> dict[str, Any]:
    """Every global RNG, in types ``torch.load(weights_only=True)`` accepts (numpy's key array becomes a tensor)."""
    kind, key, position, has_gauss, cached_gaussian = np.random.get_state()
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(key.astype(np.int64)), position, has_gauss, cached_gaussian),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    kind, key, position, has_gauss, cached_gaussian = states["numpy"]
    np.random.set_state((kind, key.numpy().astype(np.uint32), position, has_gauss, cached_gaussian))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
