#!/bin/bash
# Verifier: stats.median is right for odd and even lengths and stats.mean still works.
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
if python3 - <<'EOF'
import sys
sys.path.insert(0, ".")
from stats import mean, median
assert median([3, 1, 2]) == 2, median([3, 1, 2])
assert median([4, 1, 3, 2]) == 2.5, median([4, 1, 3, 2])
assert median([10, 20]) == 15, median([10, 20])
assert median([7]) == 7
assert mean([1, 2, 3]) == 2
EOF
then
    echo '{"reward": 1}' > "$LOGS_DIR/reward.json"
else
    echo '{"reward": 0}' > "$LOGS_DIR/reward.json"
fi
