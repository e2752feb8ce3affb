"""Sampling seeds of evaluation trials: one per (task, pass), shared by the agentic evals (``evals.runner``) and the MCQ
suite (``evals.mcq``)."""

from __future__ import annotations

import hashlib


def trial_seed(base: int | None, task_id: str, pass_index: int) -> int | None:
    """The sampling seed of one trial: ``int(sha256(f"{base}:{task_id}:{pass_index}")[:15], 16)``, None without a
    base. Each (task, pass) draws its own stream — passes differ, reruns repeat, and the tasks of one pass are
    independent draws. (``base + pass`` for every task made a pass's tasks share one stream: with the tiny model one
    unlucky stream failed nearly every task of a pass alike — held-out Pass@1 0.056 in one pass, 0.58 in the next.)
    Two policies evaluated with the same base get the same seeds per trial, so their comparison stays paired."""
    if base is None:
        return None
    return int(hashlib.sha256(f"{base}:{task_id}:{pass_index}".encode()).hexdigest()[:15], 16)
