#!/bin/bash
# Verifier: top_words.txt holds the three most frequent words with their counts.
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
expected=$(cat <<'EOF'
the 5
dog 3
fox 3
EOF
)
if [ -f top_words.txt ] && [ "$(cat top_words.txt)" = "$expected" ]; then
    echo "PASS: top_words.txt is as expected"
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: top_words.txt is missing or differs from the expected content"
    echo 0 > /logs/verifier/reward.txt
fi
