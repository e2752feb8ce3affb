"""The side of a ``verifiers`` environment that runs in the verifiers venv (``.venv-mcp/verifiers``, ``make
install-mcp-servers``): verifiers pins an MCP SDK other than ours, so it never loads into rl-recipe's process. This file
imports only the standard library and verifiers; ``envs.byo.verifiers_env`` drives it.

    python verifiers_bridge.py tasks --env ID [--path DIR]
                                        # JSON: every task's prompt, system prompt and which tools it shares
    python verifiers_bridge.py serve-tools --env ID --task N [--path DIR]
                                        # the task's toolsets (and the taskset's) as one MCP server over stdio
    python verifiers_bridge.py score --env ID [--path DIR]
                                        # JSON lines in: {"task": N, "messages": [...]}; out: {"reward", "rewards"}

``ID`` is a verifiers taskset id (``owner/name@version``, ``my-tasks``: the module ``my_tasks``, found on the path of
the verifiers venv or in ``--path``). Loading goes through verifiers' own ``load_environment``; scoring through the
task's own ``score`` (its ``@vf.reward`` functions), with no model client and no runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any


def _environment(env_id: str, path: str | None) -> Any:
    if path:
        sys.path.insert(0, path)
    import verifiers.v1 as vf

    return vf.load_environment(vf.resolve_env_config({"taskset": {"id": env_id}}))


def _text(prompt: Any) -> str:
    """A task prompt as one text: a string as it is, a list of messages as their user contents."""
    if prompt is None or isinstance(prompt, str):
        return prompt or ""
    parts = [
        getattr(message, "content", None) or (message.get("content") if isinstance(message, dict) else "")
        for message in prompt
    ]
    return "\n\n".join(str(part) for part in parts if part)


def _toolsets(env: Any, task: Any) -> list[Any]:
    return [*type(task).toolsets(task.config), *type(env.taskset).toolsets(env.taskset.config)]


def _tools_key(env: Any, index: int, task: Any) -> str:
    """Equal for tasks whose tools are the same server: the same toolset classes and configs, none of them set up per
    task (``setup_task`` not overridden). Such tasks share one world; any other task gets its own."""
    from verifiers.v1 import Toolset

    toolsets = _toolsets(env, task)
    if any(type(toolset).setup_task is not Toolset.setup_task for toolset in toolsets):
        return f"task-{index}"
    parts = [f"{type(t).__module__}.{type(t).__qualname__}:{t.config.model_dump_json()}" for t in toolsets]
    return "|".join(parts)


def tasks(env_id: str, path: str | None) -> None:
    env = _environment(env_id, path)
    rows = [
        {"index": index, "id": str(task.data.id or task.key), "prompt": _text(task.data.prompt),
         "system_prompt": task.data.system_prompt or "", "tools": _tools_key(env, index, task)}
        for index, task in enumerate(env.taskset)
    ]  # fmt: skip
    json.dump({"taskset": type(env.taskset).__name__, "tasks": rows}, sys.stdout)


async def serve_tools(env_id: str, path: str | None, index: int) -> None:
    from mcp.server import MCPServer
    from verifiers.v1.utils.decorators import discover_decorated

    env = _environment(env_id, path)
    task = list(env.taskset)[index]
    toolsets = _toolsets(env, task)
    server = MCPServer(name=f"verifiers-{env_id}", log_level="WARNING")
    for toolset in toolsets:
        await toolset.setup()
        await toolset.setup_task(task)
        prefix = f"{toolset.server_name}_" if toolset.server_name else ""
        for fn in discover_decorated(toolset, "tool"):  # what Toolset.register adds, under the model-facing name
            name = getattr(fn, "tool_name", None) or fn.__name__
            description = (fn.__doc__ or "").strip() or None
            server.add_tool(toolset._with_state(fn), name=f"{prefix}{name}", description=description)
    await server.run_stdio_async()


async def score(env_id: str, path: str | None) -> None:
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask

    env = _environment(env_id, path)
    every = list(env.taskset)
    kinds = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}
    for line in sys.stdin:
        try:
            request = json.loads(line)
            task = every[request["task"]]
            trace = vf.Trace(
                task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                agent=AgentInfo(config=vf.AgentConfig()),
            )
            for position, message in enumerate(request["messages"]):
                role = message["role"]
                node = MessageNode(
                    parent=position - 1 if position else None,
                    message=kinds[role](content=message["content"]),
                    sampled=role == "assistant",
                )
                trace.nodes.append(node)
            await task.score(trace)
            rewards = {name: reward.score for name, reward in trace.rewards.items()}
            answer: dict[str, Any] = {"reward": trace.reward, "rewards": rewards, "metrics": dict(trace.metrics)}
        except Exception as error:  # one bad request must not end the scorer: say what failed
            answer = {"error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["tasks", "serve-tools", "score"])
    parser.add_argument("--env", required=True)
    parser.add_argument("--path")
    parser.add_argument("--task", type=int)
    args = parser.parse_args()
    if args.command == "tasks":
        tasks(args.env, args.path)
    elif args.command == "serve-tools":
        asyncio.run(serve_tools(args.env, args.path, args.task))
    else:
        asyncio.run(score(args.env, args.path))


if __name__ == "__main__":
    main()
