"""Test-wide settings: Prefect keeps its home (database, results) in a temporary folder and sends no telemetry.

Set here, before any test module imports Prefect, because Prefect reads its settings on import."""

import os
import tempfile

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prefect-home-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
