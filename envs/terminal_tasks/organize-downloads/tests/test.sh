#!/bin/bash
# Verifier: downloads/ is sorted into docs/, data/ and images/.
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
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
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: found $listing"
    echo 0 > /logs/verifier/reward.txt
fi
