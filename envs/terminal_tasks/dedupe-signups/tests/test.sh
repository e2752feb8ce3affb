#!/bin/bash
# Verifier: unique_emails.txt is the lower-cased, de-duplicated list in first-seen order.
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
expected=$(cat <<'EOF'
alice@example.com
bob@example.com
carol@example.org
dave@example.net
EOF
)
if [ -f unique_emails.txt ] && [ "$(cat unique_emails.txt)" = "$expected" ]; then
    echo "PASS: unique_emails.txt is as expected"
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: unique_emails.txt is missing or differs from the expected content"
    echo 0 > /logs/verifier/reward.txt
fi
