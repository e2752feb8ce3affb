"""Test-wide settings: Prefect keeps its home (database, results) in a temporary folder and sends no telemetry;
hypothesis runs under a named settings profile.

Set here, before any test module imports Prefect, because Prefect reads its settings on import.

Hypothesis profiles (``HYPOTHESIS_PROFILE``): ``default`` keeps the library's 100 examples per test (the fuzz tests in
``tests/reliability`` scale theirs down from it where one example is expensive); ``thorough`` (alias ``chaos``) runs
2000. Both have no deadline (two busy cores make timings noisy) and no example database (nothing is written into the
working tree).
"""

import os
import tempfile

from hypothesis import HealthCheck, settings

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prefect-home-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

_HYPOTHESIS = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("default", max_examples=100, **_HYPOTHESIS)
settings.register_profile("thorough", max_examples=2000, **_HYPOTHESIS)
settings.register_profile("chaos", max_examples=2000, **_HYPOTHESIS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
