"""``RecipeConfig`` — the whole profile, validated once at the boundary — and loading one: a profile file and its
``extends`` chain (``resolve_profile``), ``--set`` overrides through the same validation (``apply_overrides``), a
run's stored config (``validate_config``), with limits that keep hostile YAML from exhausting the process."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from envs.faults import FaultPlan
from envs.harness.config import HarnessConfig
from envs.options import ProviderName
from flows.config.base import (
    MAX_STEPS,
    PROFILE_NAME,
    PROFILES_DIR,
    ProfileError,
    RewardBar,
    Seed,
    StageName,
    _messages,
    _Section,
    valid_harness_changes,
)
from flows.config.defects import Defect
from flows.config.sections import (
    AlertsSection,
    Backends,
    ClusterSection,
    EngineSection,
    EnvironmentSection,
    JudgeSection,
    PolicySection,
    RolloutSection,
    SandboxSection,
    ScheduleSection,
    TaskSelection,
)
from flows.config.stages import StagesSection
from tasks.tracking.contract import TrackingSettings
from trainer.backends import EngineBackend, TrainerBackend
from trainer.local.config import TrainerConfig
from trainer.specs import PolicySource


class RecipeConfig(_Section):
    """One pipeline run's config; every stage reads its own section and the shared ones."""

    profile: str = Field(max_length=64, pattern=PROFILE_NAME)
    description: str = ""
    seed: Seed = 0
    runs_root: Path = Path("runs")
    environment: EnvironmentSection = EnvironmentSection()
    policy: PolicySection = PolicySection()
    tasks: TaskSelection = TaskSelection()
    backends: Backends = Backends()
    engine: EngineSection = EngineSection()
    judge: JudgeSection = JudgeSection()
    sandbox: SandboxSection = SandboxSection()
    alerts: AlertsSection = AlertsSection()
    schedule: ScheduleSection = ScheduleSection()
    tracking: TrackingSettings = TrackingSettings()
    """Experiment trackers the stages also report to (``tasks.tracking``): TensorBoard, MLflow, W&B offline."""
    harness: dict[str, Any] = Field(default_factory=dict)
    """Changes to the policy's harness (``HarnessConfig`` fields) for every rollout of this run."""
    trainer: TrainerConfig = TrainerConfig(lr=1e-4)
    rollout: RolloutSection = RolloutSection()
    cluster: ClusterSection | None = None
    stages: StagesSection = StagesSection()
    faults: FaultPlan = FaultPlan()
    """Injected infra faults (``envs.faults``; off at rate 0): ``--set faults.rate=0.1`` for a chaos run."""
    defects: tuple[Defect, ...] = ()
    """Deliberate defects for the gate matrix (``Defect``); none in a real run."""

    @model_validator(mode="after")
    def _consistent(self) -> RecipeConfig:
        if self.backends.engine is EngineBackend.OPENAI and not self.engine.url:
            raise ValueError("backends.engine 'openai' needs engine.url (a vLLM-compatible base URL)")
        if self.backends.trainer.on_cluster and self.cluster is None:
            raise ValueError(f"backends.trainer {self.backends.trainer.value!r} needs a cluster section")
        valid_harness_changes(self.harness, where="harness: ")
        if self.trainer.retention is not None:
            raise ValueError("trainer.retention is the hero's to set: use stages.hero.retention (coef, sources)")
        if self.backends.trainer is TrainerBackend.SKYRL and self.stages.hero.retention.coef > 0:
            raise ValueError(
                "stages.hero.retention.coef > 0 needs our trainer (backends.trainer local or ray_job): "
                "SkyRL's trainer has no PPO-ptx term"
            )
        own = self.environment.file is not None or self.environment.verifiers is not None
        if own and self.backends.sandbox is not ProviderName.LOCAL:
            raise ValueError(
                f"a team's own environment runs in the local sandbox: its servers start from this machine's paths, "
                f"which a {self.backends.sandbox.value} image does not hold (backends.sandbox: local)"
            )
        stand_in = self.cluster is not None and self.cluster.megatron_stand_in
        if stand_in and self.backends.trainer is not TrainerBackend.RAY_JOB:
            raise ValueError("cluster.megatron_stand_in is for backends.trainer 'ray_job' (our loop stands in)")
        return self

    def planned_harness(self) -> HarnessConfig:
        """The harness a run of this profile plans with, before its base exists: the bootstrap spec's dialect and
        thinking for a bootstrapped base, then the profile's ``harness`` changes (at run time the base's own
        ``harness.json`` takes the spec's place)."""
        base = {}
        if self.policy.source is PolicySource.BOOTSTRAP:
            base = {"tool_format": self.policy.bootstrap.tool_format, "thinking": self.policy.bootstrap.thinking}
        return HarnessConfig(**base | self.harness)

    def digest(self) -> str:
        """sha256 of the config's canonical JSON (16 hex): equal digests, equal configs."""
        return section_digest(self.model_dump(mode="json"))

    def stage(self, name: StageName) -> BaseModel:
        return getattr(self.stages, name.value)


class RunChanges(BaseModel):
    """The changes to a profile most often made for one run, as typed fields (the Prefect UI shows them as a form);
    unset fields keep the profile's value. Anything else: ``overrides`` (KEY=VALUE)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    overfit_steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    """Optimizer steps of the overfit gate (stages.overfit.steps)."""
    overfit_min_reward_gain: RewardBar | None = None
    """The overfit gate's bar: subset reward after − before (stages.overfit.thresholds.min_reward_gain)."""
    hero_steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    """Optimizer steps of the hero run (stages.hero.steps)."""
    hero_min_ci_low: RewardBar | None = None
    """The hero gate's bar: the low end of the held-out Pass@1 gain's CI (stages.hero.thresholds.min_ci_low)."""
    learning_rate: float | None = Field(None, gt=0)
    """AdamW peak learning rate (trainer.lr)."""
    engine_url: str | None = None
    """A vLLM-compatible engine to generate with (sets backends.engine=openai and engine.url); empty: the local one."""

    def overrides(self) -> list[str]:
        paths = {
            "overfit_steps": "stages.overfit.steps",
            "overfit_min_reward_gain": "stages.overfit.thresholds.min_reward_gain",
            "hero_steps": "stages.hero.steps",
            "hero_min_ci_low": "stages.hero.thresholds.min_ci_low",
            "learning_rate": "trainer.lr",
            "engine_url": "engine.url",
        }
        changes = [f"{paths[name]}={value}" for name, value in self.model_dump(exclude_none=True).items()]
        return changes + (["backends.engine=openai"] if self.engine_url else [])


def section_digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def profile_path(profile: str | Path) -> Path:
    """A profile name (``local``) → ``deployments/profiles/local.yaml``; a path is taken as it is."""
    path = Path(profile)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    named = PROFILES_DIR / f"{profile}.yaml"
    if not named.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
        raise ProfileError(f"no profile named {profile!r}; profiles are: {known} (or give a path to a .yaml file)")
    return named


# What PyYAML raises besides YAMLError on hostile text: explicit tags its constructors cannot fit (``!!int x``,
# ``!!timestamp x``), integers past Python's 4300-digit limit, nesting deeper than the interpreter's stack.
_YAML_CRASHES = (yaml.YAMLError, ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError)
MAX_PROFILE_DEPTH = 32
MAX_PROFILE_NODES = 100_000


def _yaml(text: str) -> Any:
    """``text`` as YAML, or ``ValueError`` saying why not (one type for every way a document can be refused)."""
    try:
        return yaml.safe_load(text)
    except _YAML_CRASHES as error:
        raise ValueError(f"{type(error).__name__}: {' '.join(str(error).split())[:300]}") from None


def _parse_value(text: str) -> Any:
    """An override's value as YAML (``30`` → int, ``[1, 2]`` → list, ``true`` → bool); text YAML cannot read stays
    the string (validation then says whether the field takes a string)."""
    try:
        return _yaml(text)
    except ValueError:
        return text


def _plain(value: Any, source: str) -> Any:
    """A copy of a YAML document as JSON-like data: text keys only, no alias cycles, at most ``MAX_PROFILE_DEPTH``
    levels and ``MAX_PROFILE_NODES`` values (aliases are expanded here, so a "billion laughs" document is refused
    instead of filling memory). Scalars JSON has no type for (a YAML date) become their text, as run.json stores
    them."""
    budget = [MAX_PROFILE_NODES]

    def copy(node: Any, depth: int, path: str) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise ProfileError(f"{source}: more than {MAX_PROFILE_NODES} values (aliases expanded); not a profile")
        if depth > MAX_PROFILE_DEPTH:
            raise ProfileError(f"{source}: nested deeper than {MAX_PROFILE_DEPTH} levels at {path or 'the top'}")
        if isinstance(node, dict):
            bad = [key for key in node if not isinstance(key, str)]
            if bad:
                raise ProfileError(f"{source}: key {bad[0]!r} at {path or 'the top'} is not text (quote it)")
            return {key: copy(child, depth + 1, f"{path}.{key}".lstrip(".")) for key, child in node.items()}
        if isinstance(node, list):
            return [copy(child, depth + 1, f"{path}[{i}]") for i, child in enumerate(node)]
        return node if node is None or isinstance(node, str | int | float | bool) else str(node)

    return copy(value, 0, "")


def apply_overrides(raw: dict[str, Any], overrides: list[str], source: str = "profile") -> dict[str, Any]:
    """``["stages.overfit.steps=30", ...]`` applied to a profile's raw mapping (a new dict; nested keys created)."""
    result = _plain(raw, source)
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key.strip():
            raise ProfileError(f"override {override!r} is not KEY=VALUE (e.g. stages.overfit.steps=30)")
        node = result
        *parents, leaf = key.strip().split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ProfileError(f"override {override!r}: {part!r} is not a section")
            node = child
        node[leaf] = _plain(_parse_value(value), f"override {key.strip()!r}")
    return result


_VALIDATED: dict[str, RecipeConfig] = {}
"""Configs this process validated, by their canonical JSON. A run's config is read when the command starts, when the
run opens and when each stage opens; each distinct one is validated once (frozen, so one instance serves them all)."""
MAX_VALIDATED = 64


def validate_config(raw: Any, source: str) -> RecipeConfig:
    """``raw`` as a ``RecipeConfig``; every problem reported at once with its field path (``ProfileError``)."""
    if not isinstance(raw, dict):
        raise ProfileError(f"{source}: a profile is a YAML mapping, got {type(raw).__name__}")
    key = json.dumps(raw, sort_keys=True, default=str)
    if (known := _VALIDATED.get(key)) is not None:
        return known
    try:
        config = RecipeConfig.model_validate(raw)
    except ValidationError as error:
        raise ProfileError(f"{source} is not a valid profile: {_messages(error)}") from None
    if len(_VALIDATED) >= MAX_VALIDATED:
        _VALIDATED.clear()
    _VALIDATED[key] = config
    return config


MAX_EXTENDS = 8
"""Profiles a chain of ``extends`` may hold (a longer one is refused: it is a cycle or a mistake)."""


def _read_profile(path: Path) -> dict[str, Any]:
    """One profile file's raw mapping (no ``extends`` resolved)."""
    try:
        raw = _yaml(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ProfileError(f"cannot read profile {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ProfileError(f"{path} is not UTF-8 text (byte {error.start})") from None
    except ValueError as error:
        raise ProfileError(f"{path} is not valid YAML: {error}") from None
    if raw is not None and not isinstance(raw, dict):
        raise ProfileError(f"{path}: a profile is a YAML mapping, got {type(raw).__name__}")
    return _plain(raw or {}, str(path))


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` on top: mappings merged key by key, anything else replaced."""
    merged = dict(base)
    for key, value in changes.items():
        merged[key] = (
            _merged(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def resolve_profile(path: Path) -> dict[str, Any]:
    """A profile's raw mapping with its ``extends: NAME`` chain resolved: the named profile first, this one on top
    (``cluster-cpu`` is ``local`` with other backends)."""
    chain: list[Path] = []
    raw = _read_profile(path)
    layers = [raw]
    while isinstance(layers[-1].get("extends"), str):
        chain.append(path)
        if len(chain) > MAX_EXTENDS:
            raise ProfileError(f"{chain[0]}: extends goes deeper than {MAX_EXTENDS} profiles (a cycle?)")
        path = profile_path(layers[-1]["extends"])
        layers.append(_read_profile(path))
    if "extends" in layers[-1]:
        raise ProfileError(f"{path}: extends names a profile (e.g. extends: local), got {layers[-1]['extends']!r}")
    merged: dict[str, Any] = {}
    for layer in reversed(layers):
        merged = _merged(merged, {k: v for k, v in layer.items() if k != "extends"})
    return merged


def load_profile(profile: str | Path, overrides: list[str] | None = None) -> RecipeConfig:
    """Read (its ``extends`` chain resolved), override and validate a profile (by name or path); nothing runs before
    this succeeds."""
    path = profile_path(profile)
    return validate_config(apply_overrides(resolve_profile(path), overrides or [], str(path)), str(path))
