"""Whether a profile can run where its backends say, checked in seconds and before any work (``recipe run`` calls it
before Prefect starts, the pipeline flow before its first stage): a cluster backend without an address, a hub policy
with no engine that can serve it, a plan whose engines and jobs do not fit the cluster at once (``flows.ledger``), a
cluster whose dashboard does not answer, vLLM engines here without a vLLM interpreter. Each is one ``PlacementError``
line that names what is missing and how to give it; a backend's own checks are its registry entry's
(``flows.placement``).

    preflight(load_profile("qwen36-35b"))     # PlacementError: ... set its dashboard with --set cluster.ray_address=...
"""

from __future__ import annotations

from pathlib import Path

import httpx

from flows.config import RecipeConfig
from flows.placement import ENGINES, PlacementError, cluster_token_file, needs_cluster, no_address

REACH_TIMEOUT_S = 5.0


_PASSED: set[str] = set()
"""Digests of the configs that passed here: ``recipe run`` checks before it starts Prefect, then the pipeline flow
(also started from the UI) would check the same config again — a second round trip to the cluster's dashboard."""


def preflight(config: RecipeConfig) -> None:
    """Raise ``PlacementError`` with the first reason ``config`` cannot run (module docstring); return quietly when
    it can (at once when this process checked the same config before). Checks only what it can know in seconds: the
    profile, this machine's packages, the cluster's dashboard."""
    if config.digest() in _PASSED:
        return
    _check(config)
    _PASSED.add(config.digest())


def _check(config: RecipeConfig) -> None:
    _check_data_root(config.environment.data)
    ENGINES[config.backends.engine].check(config)
    if not needs_cluster(config):
        return
    cluster = config.cluster
    assert cluster is not None  # the config validator requires it for cluster backends
    _check_ledger(config)
    if not cluster.ray_address:
        raise PlacementError(no_address(config))
    _check_reachable(cluster.ray_address, cluster_token_file(config))


def _check_ledger(config: RecipeConfig) -> None:
    """Every phase of the run must fit the cluster's nodes (``flows.ledger``): a plan that cannot is refused here,
    not when its first job's placement group waits forever."""
    from flows.ledger import run_ledger

    ledger = run_ledger(config)
    found = ledger.shortfalls() if ledger is not None else []
    if found:
        raise PlacementError(
            f"profile {config.profile!r} does not fit its cluster: {found[0].message()} "
            f"(recipe plan --profile {config.profile} prints the ledger)"
        )


def _check_reachable(address: str, token_file: Path | None) -> None:
    from trainer.cluster.jobs import auth_headers, ray_token

    if token_file is not None and not token_file.is_file():
        raise PlacementError(
            f"no token for the Ray cluster at {address}: {token_file} is missing (recipe cluster up --profile PROFILE "
            "writes it for a cluster on this machine; else set cluster.auth_token_file)"
        )
    headers = auth_headers(ray_token(token_file))
    try:
        reply = httpx.get(f"{address.rstrip('/')}/api/version", headers=headers, timeout=REACH_TIMEOUT_S)
    except httpx.HTTPError as error:
        raise PlacementError(
            f"cannot reach the Ray cluster's dashboard at {address} ({type(error).__name__}) within "
            f"{REACH_TIMEOUT_S:g} s: start the cluster (recipe cluster up --profile PROFILE for one on this machine) "
            "or fix cluster.ray_address"
        ) from None
    if reply.status_code in (401, 403):
        raise PlacementError(
            f"the Ray cluster at {address} refused our token (HTTP {reply.status_code}): set cluster.auth_token_file "
            "to its token, or restart it with recipe cluster up"
        )
    if reply.status_code != 200:
        raise PlacementError(f"{address}/api/version answered HTTP {reply.status_code}: not a Ray dashboard")


def _check_data_root(root: Path) -> None:
    """The data root must be a folder rl-recipe may write into (new, empty, or made by it): refused before any work
    rather than at de-risk's first step (``envs.files.claim_folder`` says the same there)."""
    from envs.build import MARKER, load_manifest

    if not root.exists():
        return
    ours = (root / MARKER).is_file() or load_manifest(root) is not None
    if root.is_symlink() or not root.is_dir() or (any(root.iterdir()) and not ours):
        raise PlacementError(
            f"environment.data {root} holds files rl-recipe did not write (no {MARKER} in it): choose an empty or new "
            "folder (--set environment.data=PATH)"
        )
