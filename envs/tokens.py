"""Bearer tokens that live in files only their owner reads: a run's engine token, a local Ray cluster's token.

A token never goes into a profile, a manifest, a spec or a command line (``ps`` shows argv to every user): the
writer creates the file once with mode 0600, and everything that needs the token is handed the file's path.

    token = ensure_token_file(run_root / "engines" / "token")     # created on first use, the same one afterwards
    headers = {"Authorization": f"Bearer {read_token_file(path)}"}
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from pydantic import SecretStr

from envs.errors import RecipeError

TOKEN_BYTES = 32
"""256 bits of entropy (what Ray's own token generator uses)."""


class TokenFileError(RecipeError, OSError):
    """A token file is missing, unreadable or empty; the message names the file."""


def new_token() -> str:
    return secrets.token_hex(TOKEN_BYTES)


def ensure_token_file(path: Path) -> str:
    """The token in ``path``, creating the file (mode 0600, exclusively: two processes racing get the same token)
    with a fresh token when it does not exist."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return read_token_file(path)
    token = new_token()
    staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # The final name exists from the O_EXCL above (empty) so a racer waits on its content, not its creation; the
        # content arrives whole through a rename.
        staged_fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(staged_fd, "w") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staged, path)
    finally:
        os.close(fd)
        staged.unlink(missing_ok=True)
    return token


def read_token_file(path: Path, attempts: int = 50) -> str:
    """The token in ``path`` (a racer that just created it may still be writing: a few short waits)."""
    import time

    for _ in range(attempts):
        try:
            token = path.read_text().strip()
        except OSError as error:
            raise TokenFileError(f"cannot read the token file {path}: {error.strerror or error}") from None
        if token:
            return token
        time.sleep(0.02)
    raise TokenFileError(f"the token file {path} is empty; delete it to have a new token made")


def bearer_keys(path: Path | None) -> list[SecretStr]:
    """The keys a client of a gated server sends (``ApiClient(keys=...)``): the token in ``path``, or none."""
    return [SecretStr(read_token_file(path))] if path is not None else []


def bearer_matches(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>`` (constant-time comparison)."""
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())
