#!/bin/bash
# The GPU check (benchmarks/gpu_check.py): engine and trainer in bf16 on one CUDA device, tiny model, < 5 minutes.
# Usage: bash benchmarks/gpu_check.sh [--device cuda:0] [--requests 64] ...   (needs .venv with a CUDA torch build)
set -euo pipefail
cd "$(dirname "$0")/.."
exec timeout 300 "${PYTHON:-.venv/bin/python}" benchmarks/gpu_check.py "$@"
