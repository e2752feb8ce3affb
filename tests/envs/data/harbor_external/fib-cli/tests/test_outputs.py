import subprocess
from pathlib import Path

assert Path("/app/fib.py").is_file(), "/app/fib.py is missing"
for n, expected in [(0, "0"), (1, "1"), (10, "55"), (30, "832040")]:
    out = subprocess.run(["python3", "/app/fib.py", str(n)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == expected, (n, out)
assert Path("/app/out/fibs.txt").read_text().split() == ["0", "1", "55", "6765"]
