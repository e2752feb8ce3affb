#!/bin/bash
set -euo pipefail
cd /app
tr -cs 'A-Za-z' '\n' < speech.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c \
    | sort -k1,1nr -k2,2 | head -n 3 | awk '{ print $2, $1 }' > top_words.txt
