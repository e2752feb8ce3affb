"""Alerts: a JSON POST to a webhook (Slack-compatible ``text`` plus the structured fields), with a timeout.

post_alert("https://hooks.example/T0", {"text": "nightly overfit gate failed", "run": "local-…"}, timeout_s=10)
"""

from __future__ import annotations

from typing import Any

import httpx

from tasks.artifacts import log


class AlertError(RuntimeError):
    """The webhook could not be reached or refused the alert."""


def post_alert(url: str, payload: dict[str, Any], timeout_s: float) -> None:
    try:
        response = httpx.post(url, json=payload, timeout=timeout_s)
    except httpx.HTTPError as error:
        raise AlertError(f"alert to {url} failed: {type(error).__name__}: {error}") from error
    if response.status_code >= 400:
        raise AlertError(f"alert to {url} refused: HTTP {response.status_code}: {response.text[:200]}")
    log("alert posted to %s", url)
