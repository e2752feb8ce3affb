#!/bin/bash
# Verifier: service.ini has the [server] port changed and nothing else.
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
expected=$(cat <<'EOF'
[server]
host = 0.0.0.0
port = 9090
workers = 4

[metrics]
host = 127.0.0.1
port = 8080
path = /metrics
EOF
)
if [ -f service.ini ] && [ "$(cat service.ini)" = "$expected" ]; then
    echo "PASS: service.ini is as expected"
    echo 1 > "$LOGS_DIR/reward.txt"
else
    echo "FAIL: service.ini is missing or differs from the expected content"
    echo 0 > "$LOGS_DIR/reward.txt"
fi
