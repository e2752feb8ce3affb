#!/bin/bash
set -euo pipefail
cd /app
{
    echo "region,total"
    awk -F, 'NR > 1 { total[$2] += $4 } END { for (r in total) printf "%s,%.2f\n", r, total[r] }' sales.csv | sort
} > totals.csv
