"""Process helpers shared by tests that kill processes and check what is left."""

from pathlib import Path


def running(pid: int) -> bool:
    """Whether ``pid`` runs: a killed orphan may stay a zombie until init reaps it, which counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
