"""Holding a ledger claim on a live Ray cluster, and failing loudly when Ray cannot place it.

Ray keeps an unschedulable placement group or actor pending forever: a plan that double-books its GPUs does not fail,
it waits. Everything the run places on the cluster therefore waits a bounded time and then raises
``PlacementTimeout``, naming the holder, what it asked for and what the cluster had free at that moment.

* ``reserve`` — a claim's bundles as one placement group (``PACK``, as SkyRL places Megatron's policy workers), for
  as long as the caller holds it: how a training job standing in for SkyRL's Megatron workers holds their GPUs;
* ``place_group`` — a group of a claim's bundles on one node (``STRICT_PACK``: the run's engines per inference node);
* ``wait_placed`` — actors already created (the run's engine hosts) until Ray has placed and constructed them all.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from envs.errors import RecipeError
from trainer.cluster.ledger import Claim, Resources


class PlacementTimeout(RecipeError, RuntimeError):
    """Ray did not place a claim in time; the message names the holder, its bundles and the cluster's free resources."""


def unplaced_message(claim: Claim, placed: int, timeout_s: float, free: Resources, total: Resources) -> str:
    """One line: who waited, for what, how long, and what the cluster had free (the resources the claim names)."""
    names = sorted(claim.bundle, key=lambda name: (name != "GPU", name))
    have = ", ".join(f"{name} {free.get(name, 0.0):g} of {total.get(name, 0.0):g}" for name in names)
    return (
        f"{claim.holder} asked for {claim.describe()}: {claim.bundles - placed} not placed by Ray within "
        f"{timeout_s:g} s (free on the cluster: {have}); another holder has them or no node offers them — "
        "`recipe run --dry-run` prints the run's resource ledger"
    )


def place_group(claim: Claim, bundles: int, timeout_s: float, strategy: str = "STRICT_PACK", placed: int = 0) -> Any:
    """A placement group of ``bundles`` of ``claim``'s bundle, once Ray has scheduled it (it lives until removed or
    the job ends); ``PlacementTimeout`` after ``timeout_s``, counting ``placed`` of the claim as already placed.
    Needs ``ray.init()`` done (a Ray Job's entry point is connected)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([dict(claim.bundle) for _ in range(bundles)], strategy=strategy, name=claim.holder)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        free, total = ray.available_resources(), ray.cluster_resources()
        raise PlacementTimeout(unplaced_message(claim, placed, timeout_s, free, total))
    return group


@contextmanager
def reserve(claim: Claim, timeout_s: float) -> Iterator[Any]:
    """Hold ``claim`` as one ``PACK`` placement group while the block runs (removed after it)."""
    from ray.util.placement_group import remove_placement_group

    group = place_group(claim, claim.bundles, timeout_s, strategy="PACK")
    try:
        yield group
    finally:
        remove_placement_group(group)


def wait_placed(actors: Sequence[Any], claim: Claim, timeout_s: float) -> None:
    """Until every actor of ``claim`` is placed and constructed; ``PlacementTimeout`` after ``timeout_s`` with how
    many are still pending."""
    import ray

    pending = [actor.__ray_ready__.remote() for actor in actors]
    ready, waiting = ray.wait(pending, num_returns=len(pending), timeout=timeout_s)
    if waiting:
        free: Mapping[str, float] = ray.available_resources()
        raise PlacementTimeout(unplaced_message(claim, len(ready), timeout_s, free, ray.cluster_resources()))
    ray.get(ready)  # a constructor that raised surfaces here
