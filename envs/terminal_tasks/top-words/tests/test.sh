#!/bin/bash
# Verifier: top_words.txt holds the three most frequent words with their counts.
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
expected=$(cat <<'EOF'
the 5
dog 3
fox 3
EOF
)
if [ -f top_words.txt ] && [ "$(cat top_words.txt)" = "$expected" ]; then
    echo "PASS: top_words.txt is as expected"
    echo 1 > "$LOGS_DIR/reward.txt"
else
    echo "FAIL: top_words.txt is missing or differs from the expected content"
    echo 0 > "$LOGS_DIR/reward.txt"
fi
