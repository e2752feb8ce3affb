"""What each tracker kept, read back with the tracker's own reader (not our writer): MLflow's client, TensorBoard's
event accumulator, and W&B's offline run files (their record log, parsed with W&B's protobuf schema)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

W_AND_B_BLOCK, RECORD_HEADER = 32768, 7


def wandb_records(path: Path) -> Iterator[bytes]:
    """The records of a ``.wandb`` file: W&B's leveldb-style log (a 7-byte file header, then 32 KiB blocks of
    records, each with a 7-byte header: checksum, length, type full/first/middle/last). wandb 0.31 ships no Python
    reader (its core is Go), so the test reads the format itself."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    position, parts = RECORD_HEADER, b""
    while position + RECORD_HEADER <= len(data):
        left = W_AND_B_BLOCK - position % W_AND_B_BLOCK
        if left < RECORD_HEADER:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + RECORD_HEADER])
        if length == 0 and kind == 0:  # the block's zero padding
            position += left
            continue
        chunk = data[position + RECORD_HEADER : position + RECORD_HEADER + length]
        position += RECORD_HEADER + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            parts = chunk
        elif kind == 3:
            parts += chunk
        elif kind == 4:
            yield parts + chunk
            parts = b""


def wandb_run(folder: Path) -> tuple[set[str], list[dict[str, Any]], dict[str, Any]]:
    """(the run ids, every logged row, the summary) of all offline run folders under ``folder/wandb``."""
    from wandb.proto import wandb_internal_pb2

    ids, rows, summary = set(), [], {}
    for path in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        for data in wandb_records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.add(record.run.run_id)
            elif kind == "history":
                rows.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
            elif kind == "summary":
                for item in record.summary.update:
                    summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return ids, rows, summary


def wandb_points(rows: list[dict[str, Any]], key: str) -> dict[int, float]:
    """``key``'s values by its stage's own step (``<stage>/step``)."""
    axis = key.split("/")[0] + "/step"
    return {row[axis]: row[key] for row in rows if key in row}


def tensorboard_run(logdir: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def tensorboard_points(events: Any, key: str) -> dict[int, float]:
    return {event.step: event.value for event in events.Scalars(key)}


def tensorboard_text(events: Any, tag: str) -> str:
    """The newest text written under ``tag`` (TensorBoard keeps texts as string tensors)."""
    [*_, newest] = events.Tensors(f"{tag}/text_summary")
    return newest.tensor_proto.string_val[0].decode()


def mlflow_table(client: Any, run_id: str, artifact: str, scratch: Path) -> list[dict[str, Any]]:
    """A ``log_table`` artifact's rows (MLflow keeps it as pandas' ``split`` JSON: columns and data)."""
    local = Path(client.download_artifacts(run_id, artifact, str(scratch)))
    table = json.loads(local.read_text())
    return [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
