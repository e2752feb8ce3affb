#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
import json

with open("events.jsonl") as source:
    events = [json.loads(line) for line in source if line.strip()]
ids = [e["id"] for e in events if e["type"] == "purchase" and e["amount"] > 100]
with open("big_purchases.json", "w") as target:
    json.dump(ids, target)
EOF
