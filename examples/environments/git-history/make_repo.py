"""Make one world of the git-history environment: a small repository with a seeded, reproducible history.

    python make_repo.py WORLD_FOLDER --seed N

Every commit has a fixed author and date, so a seed always gives the same hashes.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
from pathlib import Path

AUTHORS = [("Ada Byron", "ada@example.com"), ("Grace Hopper", "grace@example.com"), ("Alan Turing", "alan@example.com")]
TOPICS = ["quarterly report", "pricing model", "client memo", "due diligence checklist", "board deck", "cap table"]
VERBS = ["Add", "Update", "Fix", "Rewrite"]


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env, timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world", type=Path)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    repo = args.world
    git(repo, "init", "-q", "-b", "main")
    for index in range(4):
        name, email = AUTHORS[(args.seed + index) % len(AUTHORS)]
        topic = rng.choice(TOPICS)
        path = repo / f"{topic.replace(' ', '_')}.md"
        path.write_text(f"# {topic}\n\nrevision {index} by {name}\n", encoding="utf-8")
        date = f"2026-0{index + 1}-1{args.seed % 10}T09:00:00+00:00"
        env = os.environ | {
            "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email, "GIT_COMMITTER_DATE": date,
        }  # fmt: skip
        git(repo, "add", path.name, env=env)
        git(repo, "commit", "-q", "-m", f"{rng.choice(VERBS)} {topic}", env=env)
    git(repo, "branch", f"review-{args.seed}")


if __name__ == "__main__":
    main()
