#!/bin/bash
# Verifier: errors.txt counts ERROR-level lines per service.
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
expected=$(cat <<'EOF'
db 3
auth 2
cache 1
payments 1
EOF
)
if [ -f errors.txt ] && [ "$(cat errors.txt)" = "$expected" ]; then
    echo "PASS: errors.txt is as expected"
    echo 1 > "$LOGS_DIR/reward.txt"
else
    echo "FAIL: errors.txt is missing or differs from the expected content"
    echo 0 > "$LOGS_DIR/reward.txt"
fi
