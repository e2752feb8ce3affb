"""calendar: listing with date ranges, reading, search, creating; bad dates and ids."""

from __future__ import annotations

import pytest

from envs.apps import ToolError, World, call_tool


def run(world: World, op: str, **args: object) -> str:
    return call_tool(world, f"calendar.{op}", args)


def ids(text: str) -> list[str]:
    return [line.split(" | ")[0] for line in text.splitlines()]


def test_list_events_and_ranges(world: World) -> None:
    assert run(world, "list_events").splitlines()[0] == (
        "e001 | 2026-03-04T10:00:00 | 2026-03-04T11:00:00 | Falcon kickoff"
    )
    assert ids(run(world, "list_events")) == ["e001", "e002", "e003"]
    assert ids(run(world, "list_events", start_date="2026-03-05")) == ["e002", "e003"]
    assert ids(run(world, "list_events", end_date="2026-03-05")) == ["e001", "e002"]  # end day inclusive
    assert ids(run(world, "list_events", start_date="2026-03-04T10:30:00", end_date="2026-03-04")) == ["e001"]
    assert run(world, "list_events", start_date="2026-04-01") == "(no events in that range)"


def test_bad_dates(world: World) -> None:
    with pytest.raises(ToolError, match=r"bad start_date 'next week'"):
        run(world, "list_events", start_date="next week")
    with pytest.raises(ToolError, match=r"before start_date"):
        run(world, "list_events", start_date="2026-03-06", end_date="2026-03-05")


def test_read_event(world: World) -> None:
    assert run(world, "read_event", event_id="e001") == (
        "id: e001\ntitle: Falcon kickoff\nstart: 2026-03-04T10:00:00\nend: 2026-03-04T11:00:00\n"
        "attendees: ana, bo\nlocation: Room 1\ndescription: Kick off the deal"
    )
    with pytest.raises(ToolError, match=r"no event with id 'e9'"):
        run(world, "read_event", event_id="e9")


def test_search_events(world: World) -> None:
    assert ids(run(world, "search_events", query="bo")) == ["e001", "e002", "e003"]  # "bo" is in "Board" too
    assert ids(run(world, "search_events", query="quarterly hq")) == ["e003"]
    assert "no events match" in run(world, "search_events", query="offsite")


def test_create_event(world: World) -> None:
    created = run(
        world,
        "create_event",
        title="Signing",
        start="2026-03-12T15:00",
        end="2026-03-12T16:30",
        attendees=["ana"],
        location="Room 2",
    )
    assert created == "created e004: Signing (2026-03-12T15:00:00 to 2026-03-12T16:30:00)"
    assert "attendees: ana\nlocation: Room 2" in run(world, "read_event", event_id="e004")
    assert ids(run(world, "list_events", start_date="2026-03-12", end_date="2026-03-12")) == ["e004"]


def test_create_event_errors(world: World) -> None:
    with pytest.raises(ToolError, match=r"must be after start"):
        run(world, "create_event", title="x", start="2026-03-12T15:00", end="2026-03-12T14:00")
    with pytest.raises(ToolError, match=r"bad end '3pm'"):
        run(world, "create_event", title="x", start="2026-03-12T15:00", end="3pm")
    with pytest.raises(ToolError, match=r"argument 'attendees'"):
        run(world, "create_event", title="x", start="2026-03-12T15:00", end="2026-03-12T16:00", attendees="ana")
