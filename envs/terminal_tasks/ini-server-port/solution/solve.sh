#!/bin/bash
set -euo pipefail
cd /app
sed -i '/^\[server\]/,/^\[/ s/^port = 8080$/port = 9090/' service.ini
