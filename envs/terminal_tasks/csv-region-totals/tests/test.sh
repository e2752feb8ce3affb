#!/bin/bash
# Verifier: totals.csv holds the per-region sums of sales.csv.
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
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
    echo 1 > "$LOGS_DIR/reward.txt"
else
    echo "FAIL: totals.csv is missing or differs from the expected content"
    echo 0 > "$LOGS_DIR/reward.txt"
fi
