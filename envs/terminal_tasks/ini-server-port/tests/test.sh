#!/bin/bash
# Verifier: service.ini has the [server] port changed and nothing else.
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
expected=$(cat <<'EOF'
[server]
host = 0.0.0.0
port = 9090
workers = 4

[metrics]
host = 127.0.0.1
port = 8080
path = /metrics
EOF
)
if [ -f service.ini ] && [ "$(cat service.ini)" = "$expected" ]; then
    echo "PASS: service.ini is as expected"
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: service.ini is missing or differs from the expected content"
    echo 0 > /logs/verifier/reward.txt
fi
