#!/bin/bash
set -euo pipefail
cd /app
tr 'A-Z' 'a-z' < signups.txt | awk '!seen[$0]++' > unique_emails.txt
