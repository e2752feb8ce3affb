#!/bin/bash
# Verifier: big_purchases.json lists the purchases over 100 (two checks, averaged).
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
python3 - /logs/verifier/reward.json <<'EOF'
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
