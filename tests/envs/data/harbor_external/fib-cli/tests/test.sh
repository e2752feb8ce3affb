#!/bin/bash
# Terminal-Bench style: the agent's work is in /app, the verifier's helpers in /tests, the reward in /logs/verifier.
mkdir -p /logs/verifier
if python3 /tests/test_outputs.py; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
