#!/bin/bash
# Verifier: country_revenue.csv sums orders by the customer's country.
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
expected=$(cat <<'EOF'
country,revenue
US,475
DE,300
EOF
)
if [ -f country_revenue.csv ] && [ "$(cat country_revenue.csv)" = "$expected" ]; then
    echo "PASS: country_revenue.csv is as expected"
    echo 1 > "$LOGS_DIR/reward.txt"
else
    echo "FAIL: country_revenue.csv is missing or differs from the expected content"
    echo 0 > "$LOGS_DIR/reward.txt"
fi
