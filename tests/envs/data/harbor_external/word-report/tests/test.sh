#!/bin/bash
# Two checks, each worth half: Harbor records both keys of reward.json.
count=0
longest=0
[ "$(cat /app/report/count.txt 2>/dev/null)" = "10" ] && count=1
[ "$(cat /app/report/longest.txt 2>/dev/null)" = "extraordinarily" ] && longest=1
mkdir -p /logs/verifier
printf '{"count": %s, "longest": %s}\n' "$count" "$longest" > /logs/verifier/reward.json
