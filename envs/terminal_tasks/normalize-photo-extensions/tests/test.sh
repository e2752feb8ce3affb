#!/bin/bash
# Verifier: photos/ holds the renamed JPEGs with their contents, the other files unchanged.
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
expected=$(cat <<'EOF'
IMG_001.jpg
IMG_002.jpg
IMG_003.jpg
IMG_004.jpg
IMG_005.PNG
notes.txt
EOF
)
listing=$(cd photos 2>/dev/null && LC_ALL=C ls -1)
if [ "$listing" = "$expected" ] && [ "$(cat photos/IMG_002.jpg)" = "jpeg-2" ] \
    && [ "$(cat photos/IMG_003.jpg)" = "jpeg-3" ] && [ "$(cat photos/IMG_005.PNG)" = "png-5" ]; then
    echo 1 > "$LOGS_DIR/reward.txt"
else
    echo "FAIL: photos/ holds: $listing"
    echo 0 > "$LOGS_DIR/reward.txt"
fi
