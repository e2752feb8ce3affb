"""Our tasks, tools and grader as TRL's ``GRPOTrainer`` takes them (``environment_factory``), for ``vs_trl.py``.

* **Tools**: ``tool_environment(apps)`` is a class whose public methods are the apps' tools, named as our harness
  names them (``sheets_read_cell``), each typed and documented from the tool's JSON schema so that TRL can build its
  schema; ``reset(task_id=…)`` forks the task's world into a scratch folder, and every call runs our app on that copy
  and answers what our harness shows the model (``envs.harness.tools.app_outcome``: an error is its text, not an
  exception).
* **Reward**: ``grade_rewards`` grades each completion's final reply with our grader against the pristine world
  (``envs.graders.grade``), as our loops do.
* **Prompt**: ``trl_tokenizer`` gives TRL the policy's tokenizer with a chat template that leaves the tool listing
  to the system message (our harness lists tools as signatures there, which is what the base learned), and the
  response template TRL needs to read the dialect's calls back. ``first_prompt_matches`` proves that TRL's first
  prompt is token for token the one our harness sends.
"""

from __future__ import annotations

import inspect
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.apps.base import TOOLS, World, tool_schema
from envs.graders import grade
from envs.harness.chat import compact_system_prompt, render
from envs.harness.config import HarnessConfig
from envs.harness.tool_formats import ToolFormatName
from envs.harness.tools import app_outcome
from envs.mcp.servers import mcp_name
from envs.sandbox.world_copy import fork_world
from envs.types import TaskSpec

JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list}


def _tool_method(registry: str) -> Any:
    """``registry``'s tool as a method of the environment: its JSON schema as the signature and docstring."""
    schema = tool_schema(registry)
    required = set(schema.get("required", ()))
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    lines = []
    for name, spec in schema.get("properties", {}).items():
        kinds = [spec.get("type")] + [option.get("type") for option in spec.get("anyOf", ())]
        annotation = next((JSON_TYPES[kind] for kind in kinds if kind in JSON_TYPES), str)
        default = inspect.Parameter.empty if name in required else spec.get("default")
        parameters.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        )
        annotations[name] = annotation
        lines.append(f"    {name}: {' '.join(str(spec.get('description') or name).split())}")

    def call(self: Any, **arguments: Any) -> str:
        return app_outcome(self._world, registry, arguments).text

    call.__name__ = call.__qualname__ = mcp_name(registry)
    call.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    call.__annotations__ = annotations
    description = " ".join(TOOLS[registry].description.split("\n\n")[0].split())
    call.__doc__ = f"{description}\n\nArgs:\n" + "\n".join(lines) if lines else description
    return call


def tool_environment(tasks: Sequence[TaskSpec], worlds_root: Path, apps: Sequence[str] | None) -> type:
    """A TRL environment class over ``apps``' tools (all apps: None); one instance per concurrent rollout."""
    by_id = {task.task_id: task for task in tasks}

    def __init__(self: Any) -> None:
        self._world, self._task, self._scratch = None, None, None

    def reset(self: Any, task_id: str, **_: Any) -> None:
        self._close()
        self._task = by_id[task_id]
        self._scratch = Path(tempfile.mkdtemp(prefix=f"trl-{task_id}-"))
        self._world = World(fork_world(worlds_root / self._task.world_id, self._scratch / self._task.world_id))

    def _close(self: Any) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def score(self: Any, answer: str | None) -> float:
        return grade(self._task, answer, worlds_root / self._task.world_id, self._world.root).score

    namespace = {"__init__": __init__, "reset": reset, "_close": _close, "_score": score, "__del__": _close}
    for registry, tool in TOOLS.items():
        if apps is None or tool.app in apps:
            namespace[mcp_name(registry)] = _tool_method(registry)
    return type("RecipeTools", (), namespace)


def final_reply(completion: list[dict[str, Any]]) -> str | None:
    """The last assistant message without tool calls: the answer our grader reads (None: the rollout never gave one)."""
    last = completion[-1] if completion else None
    if last is None or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    return (last.get("content") or "").strip()


def grade_rewards(completions: list[list[dict[str, Any]]], environments: list[Any], **_: Any) -> list[float]:
    """TRL reward function: our grader's score of each rollout's final reply on its own world copy."""
    return [env._score(final_reply(completion)) for completion, env in zip(completions, environments, strict=True)]


def system_prompt(config: HarnessConfig, apps: Sequence[str] | None) -> str:
    """What our harness puts in the system message: its prompt and the tools as signatures."""
    specs = [
        {"name": mcp_name(name), "description": tool.description, "input_schema": tool_schema(name)}
        for name, tool in sorted(TOOLS.items())
        if apps is None or tool.app in apps
    ]
    return compact_system_prompt(config.system_prompt, specs, config.tool_listing, config.tool_format)


def listing_in_system_message(template: str) -> str:
    """Our chat template with its own listing of ``tools`` switched off: TRL always renders its tools' schemas, but
    our harness lists them as signatures in the system message (``tool_listing``), which is what the base learned."""
    return (
        template.replace("{%- if tools %}", "{%- if false %}", 1)
        .replace("and not tools %}", "%}", 1)
        .replace("loop.first and tools %}", "false %}", 1)
    )


def trl_tokenizer(tokenizer: Any, tool_format: ToolFormatName) -> Any:
    """The policy's tokenizer for TRL: the listing left to the system message, and the response template that reads
    the dialect's calls back (TRL's own, for Qwen3's Hermes JSON or Qwen3.5's XML)."""
    from trl.chat_template_utils import qwen3_5_template, qwen3_template

    tokenizer.chat_template = listing_in_system_message(tokenizer.chat_template)
    tokenizer.response_template = qwen3_5_template if tool_format is ToolFormatName.QWEN3_XML else qwen3_template
    return tokenizer


def first_prompt_matches(trl_tok: Any, ours: list[int], messages: list[dict[str, str]], tools: list[Any]) -> bool:
    """TRL's first prompt for ``messages`` (rendered with ``tools``, as TRL does) equals our harness's ids."""
    text = render(trl_tok, messages, add_generation_prompt=True, tools=tools)
    return trl_tok.encode(text, add_special_tokens=False) == ours
