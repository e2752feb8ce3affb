"""ATIF export: an eval's trajectories in Harbor's Agent Trajectory Interchange Format, for ``harbor view``.

``to_atif(trajectory, decode, model)`` maps one ``Trajectory`` onto an ATIF document (``schema_version``
``ATIF-v1.4``): a ``user`` step holding the rendered prompt, then one ``agent`` step per turn — its text, its tool
calls, what came back (the tokens between this turn and the next, decoded) as the observation, and its token ids and
logprobs as metrics — with the grade in ``final_metrics.extra``. ``export_atif(run_dir, out_dir, decode)`` writes
one ``<task_id>__pass<p>/agent/trajectory.json`` per finished trial, the layout of a Harbor trial folder.

Our trajectories are token-exact (TITO): text is whatever ``decode`` (the served policy's tokenizer) makes of the
token spans, and a turn's several tool results share one observation (their boundaries are not recorded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envs.files import atomic_write_json
from envs.types import Trajectory
from evals.run_folder import TRAJECTORIES_FILE, read_trajectories

ATIF_VERSION = "ATIF-v1.4"
AGENT_NAME = "rl-recipe"
AGENT_VERSION = "1"

Decode = Callable[[Sequence[int]], str]
"""Token ids → text (the policy tokenizer's ``decode``, special tokens kept)."""


def _tool_calls(trajectory: Trajectory, turn: int) -> list[dict[str, Any]]:
    calls = [call for call in trajectory.tool_calls if call.turn == turn]
    return [
        {"tool_call_id": f"turn{turn}-call{k}", "function_name": call.tool, "arguments": call.args}
        | ({"extra": {"ok": call.ok, "error_class": call.error_class, "error": call.error}} if not call.ok else {})
        for k, call in enumerate(calls)
    ]


def _agent_step(trajectory: Trajectory, index: int, decode: Decode, model: str) -> dict[str, Any]:
    span = trajectory.turns[index]
    following = trajectory.turns[index + 1].start if index + 1 < len(trajectory.turns) else len(trajectory.tokens)
    calls = _tool_calls(trajectory, span.turn)
    step: dict[str, Any] = {
        "step_id": index + 2,
        "source": "agent",
        "model_name": model,
        "message": decode(trajectory.tokens[span.start : span.end]),
        "metrics": {
            "prompt_tokens": span.start,
            "completion_tokens": span.end - span.start,
            "completion_token_ids": trajectory.tokens[span.start : span.end],
            "logprobs": trajectory.logprobs[span.start : span.end],
        },
        "extra": {"turn": span.turn, "finish_reason": span.finish_reason, "weight_version": span.weight_version},
    }
    if calls:
        step["tool_calls"] = calls
    if following > span.end:
        result: dict[str, Any] = {"content": decode(trajectory.tokens[span.end : following])}
        if len(calls) == 1:
            result["source_call_id"] = calls[0]["tool_call_id"]
        step["observation"] = {"results": [result]}
    return step


def to_atif(trajectory: Trajectory, decode: Decode, model: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One trajectory as an ATIF document (module docstring)."""
    prompt = {"step_id": 1, "source": "user", "message": decode(trajectory.tokens[: trajectory.prompt_len])}
    steps = [prompt, *(_agent_step(trajectory, i, decode, model) for i in range(len(trajectory.turns)))]
    grade = {
        "reward": trajectory.reward,
        "passed": trajectory.passed,
        "criteria": [criterion.model_dump(mode="json") for criterion in trajectory.criteria],
        "final_answer": trajectory.final_answer,
        "stop_reason": trajectory.stop_reason.value,
        "error_class": trajectory.error_class.value if trajectory.error_class else None,
        "error": trajectory.error,
    }
    return {
        "schema_version": ATIF_VERSION,
        "session_id": trajectory.group_id,
        "agent": {"name": AGENT_NAME, "version": AGENT_VERSION, "model_name": model},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": sum(span.start for span in trajectory.turns),
            "total_completion_tokens": sum(span.end - span.start for span in trajectory.turns),
            "total_steps": len(steps),
            "extra": grade,
        },
        "extra": {"task_id": trajectory.task_id, "harness": trajectory.harness} | (extra or {}),
    }


def trial_folder(task_id: str, pass_index: int) -> str:
    return f"{task_id}__pass{pass_index}"


def export_atif(run_dir: Path, out_dir: Path, decode: Decode, model: str) -> list[Path]:
    """Every finished trial of the eval in ``run_dir`` as ``out_dir/<trial>/agent/trajectory.json``; the paths."""
    written = []
    for pass_index, attempts, trajectory in read_trajectories(run_dir / TRAJECTORIES_FILE):
        document = to_atif(trajectory, decode, model, {"pass_index": pass_index, "attempts": attempts})
        path = out_dir / trial_folder(trajectory.task_id, pass_index) / "agent" / "trajectory.json"
        atomic_write_json(path, document)
        written.append(path)
    return written
