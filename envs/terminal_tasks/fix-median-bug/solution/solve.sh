#!/bin/bash
set -euo pipefail
cd /app
sed -i 's/(ordered\[middle\] + ordered\[middle + 1\])/(ordered[middle - 1] + ordered[middle])/' stats.py
