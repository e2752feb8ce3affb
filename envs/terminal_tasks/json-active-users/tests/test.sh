#!/bin/bash
# Verifier: active_users.csv lists the active users by numeric id.
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
expected=$(cat <<'EOF'
id,name,email
5,Edsger Dijkstra,edsger@example.com
7,Grace Hopper,grace@example.com
12,Ada Lovelace,ada@example.com
EOF
)
if [ -f active_users.csv ] && [ "$(cat active_users.csv)" = "$expected" ]; then
    echo "PASS: active_users.csv is as expected"
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: active_users.csv is missing or differs from the expected content"
    echo 0 > /logs/verifier/reward.txt
fi
