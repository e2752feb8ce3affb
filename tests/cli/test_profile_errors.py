"""A profile error is answered before the heavy imports: a bad ``--set``, a bad environment file and a cluster
profile without a cluster each fail in one line with neither Prefect nor torch loaded (their import is most of the
5–7 s of CPU such an error once cost; measured after: 0.3–0.5 s)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
from cli.main import main
code = main(sys.argv[1:])
heavy = sorted(name for name in ("prefect", "torch", "transformers") if name in sys.modules)
print("exit", code, "heavy", ",".join(heavy) or "none")
"""


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--profile", "smoke", "--set", "stages.overfit.steps=0"], "stages.overfit.steps"),
        (["--profile", "smoke", "--set", "environment=no/such/folder"], "cannot read the environment file"),
        (["--profile", "qwen36-35b"], "runs on a Ray cluster"),
    ],
)
def test_a_profile_error_is_answered_before_prefect_or_torch_load(arguments: list[str], says: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "run", *arguments], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert says in done.stderr
    assert done.stdout.strip().endswith("exit 2 heavy none"), done.stdout + done.stderr
