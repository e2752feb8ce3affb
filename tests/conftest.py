"""Test-wide settings: Prefect keeps its home (database, results) in a temporary folder and sends no telemetry;
hypothesis runs under a named settings profile.

Set here, before any test module imports Prefect, because Prefect reads its settings on import.

Shared by the tests that run flows in-process (the pipeline and the chaos run): one Prefect test server for the whole
session (``prefect_harness``: ~20 s to start, so started once, only when a test asks for it) and one built
environment (``environment_data``).

Hypothesis profiles (``HYPOTHESIS_PROFILE``): ``default`` keeps the library's 100 examples per test (the fuzz tests in
``tests/reliability`` scale theirs down from it where one example is expensive); ``thorough`` (alias ``chaos``) runs
2000. Both have no deadline (two busy cores make timings noisy) and no example database (nothing is written into the
working tree).
"""

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Task fixtures written in other projects' layouts (Harbor tasks carry their own tests/test_*.py): data, not tests.
collect_ignore_glob = ["envs/data/*"]

# Each xdist worker gets a home of its own (its database is one writer's), not the one the controller passed down.
if "PREFECT_HOME" not in os.environ or "PYTEST_XDIST_WORKER" in os.environ:
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="prefect-home-")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

_HYPOTHESIS = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("default", max_examples=100, **_HYPOTHESIS)
settings.register_profile("thorough", max_examples=2000, **_HYPOTHESIS)
settings.register_profile("chaos", max_examples=2000, **_HYPOTHESIS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def environment_data(tmp_path_factory) -> Path:
    from envs.build import build_environment

    folder = tmp_path_factory.mktemp("environment") / "data"
    build_environment(folder)
    return folder
