#!/bin/bash
# Verifier: photos/ holds the renamed JPEGs with their contents, the other files unchanged.
# Harbor runs this after the agent: its work is in /app, the reward goes to /logs/verifier.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
expected=$(cat <<'EOF'
IMG_001.jpg
IMG_002.jpg
IMG_003.jpg
IMG_004.jpg
IMG_005.PNG
notes.txt
EOF
)
listing=$(cd photos 2>/dev/null && LC_ALL=C ls -1)
if [ "$listing" = "$expected" ] && [ "$(cat photos/IMG_002.jpg)" = "jpeg-2" ] \
    && [ "$(cat photos/IMG_003.jpg)" = "jpeg-3" ] && [ "$(cat photos/IMG_005.PNG)" = "png-5" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: photos/ holds: $listing"
    echo 0 > /logs/verifier/reward.txt
fi
