#!/bin/bash
set -euo pipefail
cd /app
shopt -s nullglob
cd downloads
mkdir -p docs data images
for file in *.txt *.md; do mv -- "$file" docs/; done
for file in *.csv *.json; do mv -- "$file" data/; done
for file in *.png *.jpg; do mv -- "$file" images/; done
