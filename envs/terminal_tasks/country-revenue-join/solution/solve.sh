#!/bin/bash
set -euo pipefail
cd /app
{
    echo "country,revenue"
    awk -F, 'NR == FNR { if (FNR > 1) country[$1] = $3; next }
             FNR > 1 { revenue[country[$2]] += $3 }
             END { for (c in revenue) print c "," revenue[c] }' customers.csv orders.csv | sort -t, -k2,2nr
} > country_revenue.csv
