"""Process helpers shared by tests that kill processes and check what is left."""

from envs.scratch import process_running as running

__all__ = ["running"]
