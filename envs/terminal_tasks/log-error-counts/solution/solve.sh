#!/bin/bash
set -euo pipefail
cd /app
awk '$2 == "ERROR" { gsub(/[][]/, "", $3); count[$3]++ } END { for (s in count) print s, count[s] }' app.log \
    | sort -k2,2nr -k1,1 > errors.txt
