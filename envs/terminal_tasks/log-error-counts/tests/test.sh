#!/bin/bash
# Verifier: errors.txt counts ERROR-level lines per service.
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
expected=$(cat <<'EOF'
db 3
auth 2
cache 1
payments 1
EOF
)
if [ -f errors.txt ] && [ "$(cat errors.txt)" = "$expected" ]; then
    echo "PASS: errors.txt is as expected"
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: errors.txt is missing or differs from the expected content"
    echo 0 > /logs/verifier/reward.txt
fi
