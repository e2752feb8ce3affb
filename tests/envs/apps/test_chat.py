"""chat: channels, reading with a limit, search, posting; errors."""

from __future__ import annotations

import json

import pytest

from envs.apps import ToolError, World, call_tool


def run(world: World, op: str, **args: object) -> str:
    return call_tool(world, f"chat.{op}", args)


def test_list_channels(world: World) -> None:
    assert run(world, "list_channels") == "deal-team (2 messages)\ngeneral (1 messages)"


def test_read_channel(world: World) -> None:
    assert run(world, "read_channel", channel="#deal-team") == (
        "2026-03-02T09:00:00 | ana: Model is in models/model.xlsx\n2026-03-02T09:30:00 | bo: EBITDA looks low"
    )
    assert run(world, "read_channel", channel="deal-team", limit=1) == "2026-03-02T09:30:00 | bo: EBITDA looks low"
    with pytest.raises(ToolError, match=r"no channel 'deals'; channels are: deal-team, general"):
        run(world, "read_channel", channel="deals")
    with pytest.raises(ToolError, match=r"argument 'limit'"):
        run(world, "read_channel", channel="general", limit=0)


def test_search_messages(world: World) -> None:
    assert run(world, "search_messages", query="ebitda") == "deal-team | 2026-03-02T09:30:00 | bo: EBITDA looks low"
    assert run(world, "search_messages", query="falcon cy") == "general | 2026-03-01T08:00:00 | cy: Welcome to Falcon"
    assert "no chat messages match" in run(world, "search_messages", query="zebra")


def test_post_message(world: World) -> None:
    assert run(world, "post_message", channel="general", text="Model updated") == "posted c004 to #general"
    stored = json.loads((world.apps_root / "chat" / "channels.json").read_text())["channels"][1]["messages"][-1]
    assert stored["id"] == "c004" and stored["user"] == "me" and stored["text"] == "Model updated"
    assert run(world, "read_channel", channel="general").endswith("| me: Model updated")
    with pytest.raises(ToolError, match=r"argument 'text'"):
        run(world, "post_message", channel="general", text="")
