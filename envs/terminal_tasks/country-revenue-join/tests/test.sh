#!/bin/bash
# Verifier: country_revenue.csv sums orders by the customer's country.
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
expected=$(cat <<'EOF'
country,revenue
US,475
DE,300
EOF
)
if [ -f country_revenue.csv ] && [ "$(cat country_revenue.csv)" = "$expected" ]; then
    echo "PASS: country_revenue.csv is as expected"
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: country_revenue.csv is missing or differs from the expected content"
    echo 0 > /logs/verifier/reward.txt
fi
