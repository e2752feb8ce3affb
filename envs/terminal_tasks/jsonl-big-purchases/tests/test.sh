#!/bin/bash
# Verifier: big_purchases.json lists the purchases over 100 (two checks, averaged).
# Harbor mounts the task at /app and the logs at /logs/verifier; rl-recipe passes TASK_DIR and LOGS_DIR instead.
TASK_DIR="${TASK_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$TASK_DIR" || { echo 0 > "$LOGS_DIR/reward.txt"; exit 0; }
python3 - "$LOGS_DIR/reward.json" <<'EOF'
import json
import sys
from pathlib import Path

path = Path("big_purchases.json")
try:
    ids = json.loads(path.read_text())
except (OSError, ValueError):
    ids = None
checks = {
    "is_json_list": float(isinstance(ids, list)),
    "right_ids": float(ids == ["e1", "e4", "e6"]),
}
print(checks)
Path(sys.argv[1]).write_text(json.dumps(checks))
EOF
