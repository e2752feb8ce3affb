"""The nightly gate's alert names the last pass and the first failure since, each at its commit, in its Slack text
and in structured fields (the webhook is replaced: what would be posted is captured)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flows import nightly
from tests.tasks.run_folders import make_run, overfit

HOOK = "http://127.0.0.1:9/hook"


def test_the_alert_says_where_the_gate_last_passed_and_first_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n, passed in ((1, True), (2, False), (3, False)):
        store = make_run(tmp_path, f"smoke-{n}", profile="smoke", created_at=f"2026-12-0{n}T02:00:00+00:00",
                         commit=str(n) * 40)  # fmt: skip
        overfit(store, passed, gain=0.3 if passed else 0.0, p_value=0.001 if passed else 0.5)
    posted: list[dict[str, Any]] = []
    monkeypatch.setattr(nightly, "post_alert", lambda url, payload, timeout_s: posted.append(payload))
    flow_run = SimpleNamespace(
        name="nightly-1",
        id="0000",
        parameters={"profile": "smoke", "overrides": [f"alerts.webhook_url={HOOK}"], "runs_root": str(tmp_path)},
    )
    state = SimpleNamespace(name="Failed", message="run smoke-3: stage overfit: gate failed")
    nightly.alert_on_failure(SimpleNamespace(name="nightly-overfit-gate"), flow_run, state)  # type: ignore[arg-type]
    [alert] = posted
    text = alert["text"].splitlines()
    assert text[0] == "rl-recipe: nightly-overfit-gate failed (smoke): run smoke-3: stage overfit: gate failed"
    assert text[1] == "last passed at 1111111111 (run smoke-1, 2026-12-01T02:00:00+00:00)"
    assert text[2].startswith("first failed at 2222222222 (run smoke-2, 2026-12-02T02:00:00+00:00); 2 failed")
    assert alert["last_passed"]["commit"] == "1" * 40 and alert["last_passed"]["run_id"] == "smoke-1"
    assert alert["first_failed"]["commit"] == "2" * 40 and alert["failures_since_last_pass"] == 2
