#!/bin/bash
# Verifier: stats.median is right for odd and even lengths and stats.mean still works.
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
if python3 - <<'EOF'
import sys
sys.path.insert(0, ".")
from stats import mean, median
assert median([3, 1, 2]) == 2, median([3, 1, 2])
assert median([4, 1, 3, 2]) == 2.5, median([4, 1, 3, 2])
assert median([10, 20]) == 15, median([10, 20])
assert median([7]) == 7
assert mean([1, 2, 3]) == 2
EOF
then
    echo '{"reward": 1}' > /logs/verifier/reward.json
else
    echo '{"reward": 0}' > /logs/verifier/reward.json
fi
