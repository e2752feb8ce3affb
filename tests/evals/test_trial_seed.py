"""Trial seeds: one stream per (task, pass), the same for every policy, none without a base seed."""

from __future__ import annotations

import hashlib

from evals.seeds import trial_seed


def test_each_task_and_pass_draws_its_own_seed_and_reruns_repeat() -> None:
    seeds = {(task, p): trial_seed(7, task, p) for task in ("a", "b", "c") for p in range(4)}
    assert len(set(seeds.values())) == 12  # no two trials of the eval share a stream
    assert trial_seed(7, "b", 2) == seeds["b", 2]  # a rerun (or another policy) gets the same seed
    assert trial_seed(8, "b", 2) != seeds["b", 2]


def test_the_seed_is_the_documented_hash_and_none_without_a_base() -> None:
    assert trial_seed(0, "ib-3-toy-0001", 1) == int(hashlib.sha256(b"0:ib-3-toy-0001:1").hexdigest()[:15], 16)
    assert trial_seed(None, "t", 0) is None
