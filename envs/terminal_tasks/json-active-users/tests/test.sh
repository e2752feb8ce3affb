#!/bin/bash
# Verifier: active_users.csv lists the active users by numeric id.
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
expected=$(cat <<'EOF'
id,name,email
5,Edsger Dijkstra,edsger@example.com
7,Grace Hopper,grace@example.com
12,Ada Lovelace,ada@example.com
EOF
)
if [ -f active_users.csv ] && [ "$(cat active_users.csv)" = "$expected" ]; then
    echo "PASS: active_users.csv is as expected"
    echo 1 > "$LOGS_DIR/reward.txt"
else
    echo "FAIL: active_users.csv is missing or differs from the expected content"
    echo 0 > "$LOGS_DIR/reward.txt"
fi
