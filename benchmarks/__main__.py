"""Run every benchmark with small defaults: `make bench` (each also runs on its own with --help for options)."""

import subprocess
import sys
from pathlib import Path

BENCHMARKS = [
    ["sandbox_pool.py", "--starts", "3", "--cycles", "30", "--calls", "100"],
    ["oracle_throughput.py", "--runs", "64", "--per-world", "4"],
    ["app_cli.py", "--calls", "5"],
    ["engine_decode.py"],
    ["engine_vs_vllm.py", "--repeats", "1"],  # prints "skipped" without .venv-vllm (`make bench-vllm` builds it)
    ["chain_engines.py"],  # the smoke chain on each engine; "skipped" without .venv-vllm
    ["trainer_packing.py", "--repeats", "2"],
    ["sft_packing.py", "--batches", "4", "--repeats", "2"],
    ["rollouts_e2e.py"],
    ["explorer_scale.py", "--trajectories", "100000", "--repeats", "3"],
]

if __name__ == "__main__":
    here = Path(__file__).parent
    failed = 0
    for script, *args in BENCHMARKS:
        print(f"\n=== {script} {' '.join(args)}", flush=True)
        failed += subprocess.run([sys.executable, str(here / script), *args], timeout=1800).returncode != 0
    sys.exit(1 if failed else 0)
