"""Red-team findings 3 and 4 (docs/reliability.md): two processes, one run, one accelerator.

3. Every CLI run starts its own temporary Prefect server on one shared database; run B's server freed the ``gpu`` slot
   run A held, and both trained at once. A taken slot is freed only when no live holder accounts for it.
4. Two ``recipe run --resume RUN`` at once both ran the same stage into the same folders. The second is refused in
   one line naming the first; a lock left by a killed run is taken over at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.scratch import owner_tag
from flows.config import load_profile
from tasks import concurrency
from tasks.run_lock import RunBusyError, claim, holding, release
from tasks.run_store import RunStore

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(tmp_path: Path) -> RunStore:
    config = load_profile("smoke")
    return RunStore.create(tmp_path / "runs", "smoke", config.model_dump(mode="json"), config.digest(), "smoke-r1")


@pytest.fixture
def holder(run: RunStore) -> Iterator[subprocess.Popen[str]]:
    """Another process working on the run (as ``recipe run --resume`` does while its stages run)."""
    code = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from tasks.run_lock import claim
        claim(Path({str(run.root)!r}), "recipe run --resume")
        print("held", flush=True)
        time.sleep(600)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    yield process
    if process.poll() is None:
        process.kill()
        process.wait(timeout=30)


def test_a_second_resume_is_refused_in_one_line_naming_the_first(run: RunStore, holder) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "run", "--resume", run.run_id, "--runs-root", str(run.root.parent)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"recipe: error: run {run.run_id} is being run by pid {holder.pid} since ")
    assert "(recipe run --resume)" in done.stderr
    stage = [sys.executable, "-m", "cli", "stage", "overfit", "--run", str(run.root)]
    refused = subprocess.run(stage, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and f"is being run by pid {holder.pid}" in refused.stderr
    assert not list(run.root.glob("*/manifest.json"))  # neither touched the run


def test_a_killed_holders_lock_is_taken_over_at_once(run: RunStore, holder) -> None:
    with pytest.raises(RunBusyError, match=f"pid {holder.pid}"):
        claim(run.root, "test")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    with holding(run.root, "test"):
        claim(run.root, "the pipeline's stage flow")  # the holder claims again: nested, not refused
        release(run.root)
    assert f"pid {os.getpid()} since" in (run.root / ".run.lock").read_text()


def test_a_live_runs_gpu_slot_is_not_freed_by_another_runs_server(prefect_harness, monkeypatch) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

    monkeypatch.setattr(concurrency, "_temporary_server", lambda: True)  # each CLI run's own server, one database

    def taken() -> int:
        with get_client(sync_client=True) as client:
            return client.read_global_concurrency_limit_by_name(concurrency.GPU_LIMIT).active_slots

    concurrency.ensure_gpu_limit()
    run_a = subprocess.Popen(["sleep", "120"])  # run A, training with its slot
    record = concurrency._holders_dir() / owner_tag(run_a.pid)
    try:
        with get_client(sync_client=True) as client:
            client.update_global_concurrency_limit(concurrency.GPU_LIMIT, GlobalConcurrencyLimitUpdate(active_slots=1))
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text("train-overfit\n")
        concurrency.ensure_gpu_limit()  # run B starts
        assert taken() == 1 and record.exists()
    finally:
        run_a.kill()
        run_a.wait(timeout=30)
    concurrency.ensure_gpu_limit()  # run A was killed with its server: its slot is leaked, and freed now
    assert taken() == 0 and not record.exists()
