#!/bin/bash
# Verifier: totals.csv holds the per-region sums of sales.csv.
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
expected=$(cat <<'EOF'
region,total
east,233.10
north,175.74
south,99.75
west,75.00
EOF
)
if [ -f totals.csv ] && [ "$(cat totals.csv)" = "$expected" ]; then
    echo "PASS: totals.csv is as expected"
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: totals.csv is missing or differs from the expected content"
    echo 0 > /logs/verifier/reward.txt
fi
