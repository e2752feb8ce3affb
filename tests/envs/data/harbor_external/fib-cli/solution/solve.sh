#!/bin/bash
set -euo pipefail

cat > /app/fib.py <<'PY'
import sys


def fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


if __name__ == "__main__":
    print(fib(int(sys.argv[1])))
PY
while read -r n; do python3 /app/fib.py "$n"; done < /app/numbers.txt > /app/out/fibs.txt
