"""What every stage starts from: the environment (worlds + tasks), the base policy, and the policy's harness.

* ``prepare_environment`` — the environment build for the profile's inputs under its data root (content-addressed,
  built once under a lock and shared by every run: ``envs.build.environment_build``);
* ``prepare_policy`` — the base policy: the local profile's bootstrapped tiny model (cached by content hash), a
  policy folder on disk, or a hub id the cluster's engines serve;
* ``policy_harness`` — the harness the policy was trained with (its ``harness.json``) with the run's changes on top:
  every rollout of the run uses it;
* ``select_tasks`` — the tasks a stage trains or evaluates on: the profile's tiers, and (for a policy that only ever
  saw some apps' tools) only tasks whose oracle needs nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from envs.build import environment_build, load_manifest, load_tasks
from envs.byo.build import byo_environment_build
from envs.errors import RecipeError
from envs.harness.agent import HarnessConfig
from envs.harness.policy import PolicyHarness, read_policy_harness
from envs.types import Split, TaskSpec, Tier
from tasks.artifacts import log
from trainer.specs import PolicySource


class PolicyError(RecipeError, ValueError):
    """The configured policy cannot be found or used."""


@task(name="environment", cache_policy=NO_CACHE)
def prepare_environment(root: Path, seed: int, worlds_per_domain: int) -> Path:
    """The build of worlds and task sets for ``seed`` and ``worlds_per_domain`` under the data root ``root``."""
    build = environment_build(root, seed=seed, worlds_per_domain=worlds_per_domain)
    manifest = load_manifest(build)
    assert manifest is not None  # environment_build returns intact builds only
    worlds, tasks = len(manifest.world_ids), sum(manifest.task_counts.values())
    log("environment %s: %d worlds, %d tasks, digest %s", build, worlds, tasks, manifest.content_digest)
    return build


@task(name="own-environment", cache_policy=NO_CACHE)
def prepare_own_environment(file: Path, root: Path) -> Path:
    """The build of a team's own environment file under the data root (``envs.byo.build``)."""
    build = byo_environment_build(file, root)
    manifest = load_manifest(build)
    assert manifest is not None  # published builds are intact
    tasks = sum(manifest.task_counts.values())
    log("environment %s (%s): %d worlds, %d tasks", build, file, len(manifest.world_ids), tasks)
    return build


@task(name="base-policy", cache_policy=NO_CACHE)
def prepare_policy(
    source: PolicySource, data: Path, bootstrap_spec: Any, cache: Path, path: Path | None, hub_id: str | None
) -> str:
    """The base policy as a folder path (or, for ``hub``, the model id); bootstraps the local base when asked."""
    if source is PolicySource.BOOTSTRAP:
        from trainer.bootstrap import bootstrap

        result = bootstrap(bootstrap_spec, data, cache, progress=lambda line: log("bootstrap: %s", line))
        return str(result.path)
    if source is PolicySource.FOLDER:
        assert path is not None  # the profile's validator requires it
        if not (path / "config.json").is_file():
            raise PolicyError(f"policy.path {path} is not a policy folder (no config.json)")
        return str(path)
    assert hub_id is not None
    return hub_id


def policy_harness(policy: str, changes: dict[str, Any]) -> PolicyHarness:
    """The policy folder's ``harness.json`` (defaults when it has none) with the run's harness ``changes``."""
    stored = read_policy_harness(Path(policy)) if Path(policy).is_dir() else None
    settings = stored or PolicyHarness(apps=None, harness=HarnessConfig())
    harness = HarnessConfig(**settings.harness.model_dump() | changes)
    return settings.model_copy(update={"harness": harness})


def offered_tools(apps: Sequence[str] | None) -> set[str] | None:
    from envs.apps import TOOLS

    return None if apps is None else {name for name, tool in TOOLS.items() if tool.app in apps}


def select_tasks(
    tasks: Sequence[TaskSpec], split: Split, tiers: Sequence[Tier], apps: Sequence[str] | None, policy_apps_only: bool
) -> list[TaskSpec]:
    """Tasks of ``split`` and ``tiers``; with ``policy_apps_only``, not those whose oracle needs tools beyond ``apps``'
    (a task without an oracle — a team's own, ``envs.byo`` — names no tools to judge by, so it stays)."""
    offered = offered_tools(apps) if policy_apps_only else None
    chosen = [
        t
        for t in tasks
        if t.split is split
        and t.tier in tiers
        and (offered is None or t.oracle is None or {step.tool for step in t.oracle.steps} <= offered)
    ]
    if not chosen:
        raise PolicyError(
            f"no {split.value} task of tiers {[str(t) for t in tiers]} can be solved with the apps {list(apps or [])}"
        )
    return chosen


def task_sets(
    data: Path, tiers: Sequence[Tier], apps: Sequence[str] | None, policy_apps_only: bool, limit: int | None = None
) -> tuple[list[TaskSpec], list[TaskSpec]]:
    """(train, held-out) tasks of the run, the first ``limit`` of each when given."""
    everything = load_tasks(data)
    return (
        select_tasks(everything, Split.TRAIN, tiers, apps, policy_apps_only)[:limit],
        select_tasks(everything, Split.HELDOUT, tiers, apps, policy_apps_only)[:limit],
    )
