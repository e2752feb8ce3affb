#!/bin/bash
set -euo pipefail
sed -i 's/(ordered\[middle\] + ordered\[middle + 1\])/(ordered[middle - 1] + ordered[middle])/' stats.py
