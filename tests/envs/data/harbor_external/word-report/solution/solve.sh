#!/bin/bash
set -euo pipefail
mkdir -p /app/report
wc -w < /app/text.txt | tr -d ' ' > /app/report/count.txt
tr -s '[:space:]' '\n' < /app/text.txt | awk 'length > length(best) { best = $0 } END { print best }' \
    > /app/report/longest.txt
