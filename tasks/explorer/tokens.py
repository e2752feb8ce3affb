"""A trajectory turn by turn, for reading: its tokens cut into loss-mask runs and decoded, with the tool calls.

The catalog keeps each rollout token-exact (TITO): ``tokens``, ``loss_mask`` (1 = sampled by the model) and the
engine's ``logprobs``, plus each turn's span. The page shows what the trainer sees, not a re-render of the chat: the
tokens ``[0, first turn)`` are the prompt; each turn runs from its start to the next turn's start and is cut wherever
the loss mask changes, so a generated piece (mask 1) and the observation after it (mask 0: the template's closing,
the tool results, the next generation prompt) are separate pieces, each decoded on its own.

Decoding needs the policy's tokenizer (``tokenizer.json``, read with the ``tokenizers`` library, no ``transformers``
import); without one the pieces show token ids. The context nudge is found in the decoded observations by its text
(``envs.harness.agent.context_nudge_text``; the catalog has no column for it).

    view = trajectory_view(row, turns, calls, load_decoder(Path("models/base/0575…")))
    view["turns"][0]["pieces"][0]["generated"], view["turns"][1]["nudge"]
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from tasks.run_store import RunStore

NUDGE_PATTERN = re.compile(r"\[System notice\] ~(\d+) % of the context window remains")
"""The notice ``envs.harness.agent.context_nudge_text`` appends to an observation (a test keeps the two in step)."""
MAX_PIECE_CHARS = 60_000
"""Longer decoded pieces are cut (the count of characters left out is kept)."""
MAX_MASK_RUNS = 4_000
TOKENIZER_FILE = "tokenizer.json"


class Decoder(Protocol):
    def decode(self, ids: list[int]) -> str: ...


class TokenizerDecoder:
    """Decodes ids with a ``tokenizer.json`` (special tokens kept: they mark the chat's roles)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.path = path
        self.tokenizer = Tokenizer.from_file(str(path))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def load_decoder(path: Path | str) -> TokenizerDecoder:
    """A decoder from a ``tokenizer.json`` or a policy folder that holds one."""
    path = Path(path)
    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no {TOKENIZER_FILE} at {path}")
    return TokenizerDecoder(file)


def find_tokenizer(store: RunStore) -> Path | None:
    """The ``tokenizer.json`` of the run's base policy (the de-risk stage's ``policy`` output), when it is on disk."""
    for manifest in store.manifests():
        policy = manifest.outputs.get("policy")
        if not isinstance(policy, str):
            continue
        for folder in (Path(policy), store.path(policy)):
            if (folder / TOKENIZER_FILE).is_file():
                return folder / TOKENIZER_FILE
    return None


def mask_runs(mask: Sequence[int]) -> list[list[int]]:
    """``[start, end, value]`` for each run of equal loss-mask values, in order."""
    runs: list[list[int]] = []
    for i, value in enumerate(mask):
        if runs and runs[-1][2] == value:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1, int(value)])
    return runs


def _piece(
    tokens: Sequence[int], logprobs: Sequence[float], start: int, end: int, generated: bool, decoder: Decoder | None
) -> dict[str, Any]:
    ids = list(tokens[start:end])
    text = decoder.decode(ids) if decoder is not None else " ".join(map(str, ids))
    piece: dict[str, Any] = {"start": start, "end": end, "generated": generated, "chars": len(text)}
    piece["text"] = text[:MAX_PIECE_CHARS]
    piece["truncated"] = max(0, len(text) - MAX_PIECE_CHARS)
    if generated and end > start and logprobs:
        piece["mean_logprob"] = sum(logprobs[start:end]) / (end - start)
    if not generated and (found := NUDGE_PATTERN.search(text)):
        piece["nudge"] = int(found.group(1))
    return piece


def _pieces(
    tokens: Sequence[int],
    logprobs: Sequence[float],
    runs: list[list[int]],
    start: int,
    end: int,
    decoder: Decoder | None,
) -> list[dict[str, Any]]:
    """The region ``[start, end)`` cut at every loss-mask change."""
    pieces = []
    for run_start, run_end, value in runs:
        low, high = max(start, run_start), min(end, run_end)
        if low < high:
            pieces.append(_piece(tokens, logprobs, low, high, bool(value), decoder))
    return pieces


def trajectory_view(
    row: dict[str, Any], turns: list[dict[str, Any]], calls: list[dict[str, Any]], decoder: Decoder | None
) -> dict[str, Any]:
    """A catalog row (with its token lists), its turns and tool calls → the page's turn-by-turn view."""
    tokens = list(row.pop("tokens") or [])
    mask = list(row.pop("loss_mask") or [])
    logprobs = list(row.pop("logprobs") or [])
    row["criteria"] = json.loads(row["criteria"]) if isinstance(row.get("criteria"), str) else (row["criteria"] or [])
    runs = mask_runs(mask)
    n = len(tokens)
    starts = [t["start_pos"] for t in turns]
    prompt_end = starts[0] if starts else min(row.get("prompt_len") or 0, n)
    calls_by_turn: dict[int, list[dict[str, Any]]] = {}
    for call in calls:
        calls_by_turn.setdefault(call["turn"], []).append(call)
    views = []
    regions = [(t, t["start_pos"], starts[i + 1] if i + 1 < len(starts) else n) for i, t in enumerate(turns)]
    if not turns and prompt_end < n:
        regions = [({"turn": 0, "start_pos": prompt_end, "end_pos": n}, prompt_end, n)]
    for turn, start, end in regions:
        pieces = _pieces(tokens, logprobs, runs, start, end, decoder)
        generated = [p for p in pieces if p["generated"]]
        n_generated = sum(p["end"] - p["start"] for p in generated)
        nudges = [p["nudge"] for p in pieces if "nudge" in p]
        views.append(
            {
                "turn": turn["turn"],
                "start": start,
                "end": end,
                "generated_end": turn.get("end_pos"),
                "finish_reason": turn.get("finish_reason"),
                "weight_version": turn.get("weight_version"),
                "n_generated": n_generated,
                "mean_logprob": (
                    sum(sum(logprobs[p["start"] : p["end"]]) for p in generated) / n_generated
                    if n_generated and logprobs
                    else None
                ),
                "nudge": nudges[0] if nudges else None,
                "calls": calls_by_turn.pop(turn["turn"], []),
                "pieces": pieces,
            }
        )
    spans = [(t["start_pos"], min(t["end_pos"], n)) for t in turns if t["end_pos"] is not None]
    masked_in_spans = sum(sum(mask[s:e]) for s, e in spans)
    return row | {
        "prompt": _pieces(tokens, logprobs, runs, 0, prompt_end, decoder),
        "turns": views,
        "unplaced_calls": [c for group in calls_by_turn.values() for c in group],
        "mask_runs": runs[:MAX_MASK_RUNS],
        "mask_runs_total": len(runs),
        # TITO at a glance: both are 0 when the loss mask covers exactly the turns' sampled spans
        "masked_outside_spans": sum(mask) - masked_in_spans if spans else None,
        "unmasked_in_spans": sum(e - s for s, e in spans) - masked_in_spans if spans else None,
        "decoded": decoder is not None,
    }
