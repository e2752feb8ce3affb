#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
import csv
import json

with open("users.json") as source:
    users = sorted((u for u in json.load(source) if u["active"]), key=lambda u: u["id"])
with open("active_users.csv", "w", newline="") as target:
    writer = csv.writer(target, lineterminator="\n")
    writer.writerow(["id", "name", "email"])
    writer.writerows([u["id"], u["name"], u["email"]] for u in users)
EOF
