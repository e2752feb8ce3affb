#!/bin/bash
# Verifier: downloads/ is sorted into docs/, data/ and images/.
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
expected=$(cat <<'EOF'
downloads/data/config.json
downloads/data/sales.csv
downloads/docs/notes.txt
downloads/docs/readme.md
downloads/images/logo.png
downloads/images/photo.jpg
downloads/setup.exe
EOF
)
listing=$(find downloads -type f 2>/dev/null | LC_ALL=C sort)
if [ "$listing" = "$expected" ] && [ "$(cat downloads/data/sales.csv)" = "$(printf 'month,total\njan,10')" ]; then
    echo 1 > "$LOGS_DIR/reward.txt"
else
    echo "FAIL: found $listing"
    echo 0 > "$LOGS_DIR/reward.txt"
fi
