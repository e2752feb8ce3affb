#!/bin/bash
# Wheels for running benchmarks/gpu_check.sh on a GPU machine that has its own CUDA torch but none of our other
# dependencies and no network (as the lent H200 had: Python 3.12, torch 2.11 + cu130, transformers 5.17, no pydantic).
# Downloads, at the versions in requirements.lock, what gpu_check imports beyond such an image, into .whl/ (ignored by
# git; ~30 MB). There:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:$PWD PYTHON=python3 bash benchmarks/gpu_check.sh
# Usage: bash benchmarks/gpu_wheels.sh [PYTHON_VERSION]   (default 3.12)
set -euo pipefail
cd "$(dirname "$0")/.."
NEEDED="annotated-types cffi cryptography et-xmlfile h2 hpack hyperframe httpcore2 httpx2 huggingface-hub mcp mcp-types
openpyxl opentelemetry-api pdfminer.six pdfplumber pycel pydantic pydantic-core python-docx python-multipart python-pptx
ruamel.yaml sse-starlette starlette transformers truststore typing-extensions typing-inspection uvicorn"
normalise() { tr 'A-Z_.' 'a-z--'; }
pins=()
for name in $NEEDED; do
  pin=$(grep -i "^[^#]" requirements.lock | awk -F'==' -v want="$(echo "$name" | normalise)" \
    '{ key = tolower($1); gsub(/[_.]/, "-", key); if (key == want) print $0 }')
  [ -n "$pin" ] || { echo "gpu_wheels: $name is not in requirements.lock" >&2; exit 1; }
  pins+=("$pin")
done
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
timeout 600 "${PYTHON:-.venv/bin/python}" -m pip download -q --no-deps --only-binary=:all: \
  --python-version "${1:-3.12}" --implementation cp "${platforms[@]}" -d .whl "${pins[@]}"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
du -sh .whl
