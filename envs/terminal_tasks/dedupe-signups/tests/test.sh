#!/bin/bash
# Verifier: unique_emails.txt is the lower-cased, de-duplicated list in first-seen order.
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
expected=$(cat <<'EOF'
alice@example.com
bob@example.com
carol@example.org
dave@example.net
EOF
)
if [ -f unique_emails.txt ] && [ "$(cat unique_emails.txt)" = "$expected" ]; then
    echo "PASS: unique_emails.txt is as expected"
    echo 1 > "$LOGS_DIR/reward.txt"
else
    echo "FAIL: unique_emails.txt is missing or differs from the expected content"
    echo 0 > "$LOGS_DIR/reward.txt"
fi
