"""The override wire format SkyRL's entry point takes (``key.path=value``, read by OmegaConf's CLI parser), and our
own checks of a rendered set. Standard library + PyYAML only: the dry-run job imports this on the cluster.

Values are written so OmegaConf reads back the same Python value: ``true`` / ``false``, ``null``, ints, floats in
``repr`` form (``1e-06`` is a float to OmegaConf), lists as ``[a,b]`` with strings quoted inside, plain strings
unquoted (a string OmegaConf would read as another type, or one with characters its grammar uses, is refused).

    format_override("trainer.policy.optimizer_config.adam_betas", [0.9, 0.98])   # 'trainer....adam_betas=[0.9,0.98]'
    parse_overrides(["trainer.epochs=3"])                                     # {'trainer.epochs': 3}
    problems(parse_overrides(lines))                                          # [] when consistent
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

RECIPE_SECTION = "rl_recipe"
"""Our own top-level section: recipe settings SkyRL 0.3.x has no key for, read by our generator and entry point."""
GENERATOR_EXTENSION_PREFIXES = ("generator.rate_limit.",)
"""SkyRL keys that only a generator config declaring them accepts (SkyRL's ``RateLimiterConfig``, wired by custom
generators such as its Harbor integration; our generator declares it too)."""

_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_UNSAFE = re.compile(r"[\s,\[\]{}'\"=]")


class OverrideError(ValueError):
    """An override that is not ``key.path=value`` or a value the wire format cannot carry."""


def format_value(value: Any) -> str:
    """A Python value as OmegaConf's CLI parser reads it back (see the module docstring)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(f"'{v}'" if isinstance(v, str) else format_value(v) for v in value) + "]"
    if isinstance(value, str):
        if not value or _UNSAFE.search(value) or parse_value(value) != value:
            raise OverrideError(f"string {value!r} would not read back as itself in an override")
        return value
    raise OverrideError(f"no override form for a {type(value).__name__}: {value!r}")


def format_override(key: str, value: Any) -> str:
    if not _KEY.match(key):
        raise OverrideError(f"{key!r} is not a dotted key")
    return f"{key}={format_value(value)}"


def parse_value(text: str) -> Any:
    """An override's value as OmegaConf reads it: YAML scalars and flow lists, and ``1e-06``-style floats."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and _FLOAT.match(value):
        return float(value)
    return value


def parse_overrides(lines: Iterable[str]) -> dict[str, Any]:
    """``["a.b=1", ...]`` → ``{"a.b": 1, ...}``; a line that is not ``key=value`` or a repeated key is an error."""
    values: dict[str, Any] = {}
    for line in lines:
        key, sep, text = line.partition("=")
        if not sep or not _KEY.match(key):
            raise OverrideError(f"{line!r} is not key.path=value")
        if key in values:
            raise OverrideError(f"{key} is given twice")
        values[key] = parse_value(text)
    return values


def nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys → nested mappings (``{"a.b": 1}`` → ``{"a": {"b": 1}}``)."""
    tree: dict[str, Any] = {}
    for key, value in sorted(values.items()):
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def is_skyrl_key(key: str) -> bool:
    """Whether SkyRL's own config classes define ``key`` (ours live under ``rl_recipe.``)."""
    return not key.startswith(RECIPE_SECTION + ".")


# --- our checks of a rendered set ------------------------------------------------------------------------------------

REQUIRED = (
    "trainer.policy.model.path",
    "trainer.strategy",
    "trainer.train_batch_size",
    "trainer.policy_mini_batch_size",
    "generator.n_samples_per_prompt",
    "trainer.placement.policy_num_nodes",
    "trainer.placement.policy_num_gpus_per_node",
    "generator.inference_engine.num_engines",
    "generator.inference_engine.tensor_parallel_size",
    "trainer.algorithm.policy_loss_type",
    "trainer.algorithm.loss_reduction",
    "trainer.algorithm.advantage_estimator",
)
POLICY_LOSS_TYPES = ("regular", "rollout_is", "dppo")
"""The SkyRL policy losses our tables render (``mappings.POLICY_LOSSES``)."""
LOSS_REDUCTION_TYPES = ("token_mean", "sequence_mean", "seq_mean_token_sum_norm", "prompt_mean")
MEGATRON = "trainer.policy.megatron_config."


def _int(values: Mapping[str, Any], key: str, default: int = 1) -> int:
    value = values.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _policy_gpus(values: Mapping[str, Any]) -> int:
    return _int(values, "trainer.placement.policy_num_nodes") * _int(
        values, "trainer.placement.policy_num_gpus_per_node"
    )


def policy_data_parallel(values: Mapping[str, Any]) -> int:
    """Megatron's data-parallel size: policy GPUs ÷ (TP · PP · CP); 0 when it does not divide."""
    gpus = _policy_gpus(values)
    dense = (
        _int(values, MEGATRON + "tensor_model_parallel_size")
        * _int(values, MEGATRON + "pipeline_model_parallel_size")
        * _int(values, MEGATRON + "context_parallel_size")
    )
    return gpus // dense if gpus % dense == 0 else 0


def problems(values: Mapping[str, Any]) -> list[str]:
    """What makes a rendered set unlaunchable on SkyRL 0.3.x, by our reading of its documented rules (empty: none).

    Fully async: train batch = mini-batch, generation batched off, training and generation on separate GPUs, and
    ``num_parallel_generation_workers`` within [B, B·(S+1)]; ``sample_full_batch`` needs the zero-variance filter.
    Megatron: the policy GPUs split into TP·PP·CP (and EP·PP) evenly; context parallel needs packed micro-batches.
    Rate limit: at least one trajectory per second when set."""
    found = [f"{key} is missing" for key in REQUIRED if key not in values]
    if values.get("trainer.algorithm.policy_loss_type", "regular") not in POLICY_LOSS_TYPES:
        found.append(f"trainer.algorithm.policy_loss_type must be one of {', '.join(POLICY_LOSS_TYPES)}")
    if values.get("trainer.algorithm.loss_reduction", "token_mean") not in LOSS_REDUCTION_TYPES:
        found.append(f"trainer.algorithm.loss_reduction must be one of {', '.join(LOSS_REDUCTION_TYPES)}")
    mini = _int(values, "trainer.policy_mini_batch_size")
    if values.get("trainer.fully_async.enabled"):
        if values.get("trainer.train_batch_size") != mini:
            found.append("fully async: trainer.train_batch_size must equal trainer.policy_mini_batch_size")
        if values.get("generator.batched", False):
            found.append("fully async: generator.batched must be false")
        if values.get("trainer.placement.colocate_all", True):
            found.append("fully async: trainer.placement.colocate_all must be false (separate GPUs)")
        staleness = _int(values, "trainer.fully_async.max_staleness_steps", 4)
        workers = _int(values, "trainer.fully_async.num_parallel_generation_workers", 768)
        if not mini <= workers <= mini * (staleness + 1):
            found.append(
                f"fully async: num_parallel_generation_workers {workers} outside "
                f"[mini-batch {mini}, mini-batch · (staleness + 1) = {mini * (staleness + 1)}]"
            )
    if values.get("trainer.fully_async.sample_full_batch") and not values.get("trainer.algorithm.zero_variance_filter"):
        found.append("trainer.fully_async.sample_full_batch needs trainer.algorithm.zero_variance_filter true")
    if values.get("trainer.strategy") == "megatron":
        if not policy_data_parallel(values):
            found.append("the policy GPUs are not a multiple of Megatron TP · PP · CP")
        gpus = _policy_gpus(values)
        experts = _int(values, MEGATRON + "expert_model_parallel_size") * _int(
            values, MEGATRON + "pipeline_model_parallel_size"
        )
        if gpus % experts:
            found.append(f"the policy GPUs ({gpus}) are not a multiple of Megatron EP · PP ({experts})")
        if _int(values, MEGATRON + "context_parallel_size") > 1 and not values.get(
            "trainer.remove_microbatch_padding", True
        ):
            found.append("Megatron context parallel needs trainer.remove_microbatch_padding true")
    rate = values.get("generator.rate_limit.trajectories_per_second")
    if values.get("generator.rate_limit.enabled") and rate is not None and rate < 1.0:
        found.append(f"generator.rate_limit.trajectories_per_second {rate} is below SkyRL's minimum of 1.0")
    return found


def lines(values: Mapping[str, Any]) -> list[str]:
    """``values`` as sorted ``key=value`` lines (the golden files' form)."""
    return sorted(format_override(key, value) for key, value in values.items())


def split_keys(keys: Sequence[str]) -> tuple[list[str], list[str]]:
    """(SkyRL's keys, ours) of a rendered set."""
    return [k for k in keys if is_skyrl_key(k)], [k for k in keys if not is_skyrl_key(k)]
