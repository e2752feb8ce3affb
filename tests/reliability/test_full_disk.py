"""Red-team finding 7 (docs/reliability.md): a full disk was reported as something else — an ``ExceptionGroup`` in the
systems stage, ``ValidationFailed: suite 'eval_results' failed on 0 rows`` in ablations (each arm's ``OSError 28``
swallowed as that arm's failure). Now the stage's error names the device and the path, whatever wrapped it.

The disk here is a real one that fills up: a 1 MiB tmpfs mounted for the test (root), the run folder on it.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.diskspace import NoSpaceLeft, device_of, no_space
from flows.config import StageName, load_profile
from flows.stage import open_stage
from tasks.run_store import RunStore, StageStatus


def test_the_full_disk_is_found_under_what_wraps_it(tmp_path: Path) -> None:
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "arm" / "model.safetensors"))
    try:
        try:
            raise full
        except OSError as error:
            raise ValueError("suite 'eval_results' failed on 0 rows") from error
    except ValueError as wrapped:
        group = ExceptionGroup("unhandled errors in a TaskGroup", [RuntimeError("other"), wrapped])
    assert no_space(group) is full and no_space(RuntimeError("no")) is None
    message = str(NoSpaceLeft.of(full))
    assert message.startswith(f"no space left on {device_of(tmp_path)} ({tmp_path / 'arm' / 'model.safetensors'})")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "rr-full-disk", str(disk)], check=True, timeout=30)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, timeout=30)


def test_a_stage_that_fills_the_disk_says_so(small_disk: Path) -> None:
    config = load_profile("smoke")
    store = RunStore.create(small_disk, "smoke", config.model_dump(mode="json"), config.digest(), "smoke-full")

    async def fill(folder: Path) -> None:
        with (folder / "checkpoint.bin").open("wb") as handle:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()

    async def work(folder: Path) -> None:
        async with asyncio.TaskGroup() as group:  # as the systems stage's trials run: the error arrives as a group
            group.create_task(fill(folder))
            group.create_task(asyncio.sleep(5))

    with pytest.raises(NoSpaceLeft) as raised, open_stage(str(store.root), StageName.DERISK, small_disk) as stage:
        asyncio.run(work(stage.dir))
    assert str(raised.value).startswith(f"no space left on rr-full-disk (writing under {stage.dir}; ")
    (stage.dir / "checkpoint.bin").unlink()
    manifest = store.manifest(StageName.DERISK.folder)
    assert manifest is not None and manifest.status in (StageStatus.RUNNING, StageStatus.ERROR)  # whole, never half
