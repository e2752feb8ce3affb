"""calendar: the world's calendar (``apps_data/calendar/events.json``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timedelta

from pydantic import Field

from envs.apps.base import (
    AppRecord,
    Timestamp,
    ToolError,
    World,
    load_app_state,
    matches,
    next_id,
    parse_timestamp,
    save_app_state,
    tool,
)

APP = "calendar"
STATE = "calendar/events.json"


class Event(AppRecord):
    id: str
    title: str
    start: Timestamp
    end: Timestamp
    attendees: list[str] = Field(default_factory=list)
    location: str = ""
    description: str = ""


class Calendar(AppRecord):
    events: list[Event]


def _line(event: Event) -> str:
    return f"{event.id} | {event.start.isoformat()} | {event.end.isoformat()} | {event.title}"


def _bound(value: str, what: str, end_of_day: bool) -> datetime:
    """A filter bound; a bare date means the start of that day, or (for an end bound) the end of it."""
    moment = parse_timestamp(value, what)
    is_date_only = len(value.strip()) == len("2026-03-04")
    if not (end_of_day and is_date_only):
        return moment
    return moment + timedelta(days=1) if moment.date() < date.max else datetime.max  # 9999-12-31 has no next day


@tool(APP)
def list_events(world: World, start_date: str | None = None, end_date: str | None = None) -> str:
    """List calendar events in time order, optionally only those overlapping a date range.

    Args:
        start_date: optional first day (or date-time) of the range, e.g. "2026-03-04".
        end_date: optional last day of the range, inclusive (or a date-time), e.g. "2026-03-06".

    Returns one "id | start | end | title" line per event; read one with calendar.read_event.
    """
    events = load_app_state(world, STATE, Calendar).events
    low = _bound(start_date, "start_date", end_of_day=False) if start_date else datetime.min
    high = _bound(end_date, "end_date", end_of_day=True) if end_date else datetime.max
    if high <= low:
        raise ToolError(f"end_date {end_date!r} is before start_date {start_date!r}")
    chosen = sorted((e for e in events if e.start < high and e.end > low), key=lambda e: e.start)
    return "\n".join(_line(e) for e in chosen) if chosen else "(no events in that range)"


@tool(APP)
def read_event(world: World, event_id: str) -> str:
    """Read every field of one calendar event.

    Args:
        event_id: the event id, e.g. "e001" (see calendar.list_events).

    Returns the id, title, start, end, attendees, location and description, one per line.
    """
    events = load_app_state(world, STATE, Calendar).events
    event = next((e for e in events if e.id == event_id), None)
    if event is None:
        raise ToolError(f"no event with id {event_id!r}; find ids with calendar.list_events or calendar.search_events")
    return "\n".join(
        [
            f"id: {event.id}",
            f"title: {event.title}",
            f"start: {event.start.isoformat()}",
            f"end: {event.end.isoformat()}",
            f"attendees: {', '.join(event.attendees) or '(none)'}",
            f"location: {event.location or '(none)'}",
            f"description: {event.description or '(none)'}",
        ]
    )


@tool(APP)
def search_events(world: World, query: str) -> str:
    """Search calendar events containing every word of a query (case-insensitive).

    Args:
        query: one or more words; an event matches when each word occurs in its title, description, location or
            attendees.

    Returns matching "id | start | end | title" lines in time order, or a note that nothing matched.
    """
    events = load_app_state(world, STATE, Calendar).events
    found = sorted(
        (e for e in events if matches(query, e.title, e.description, e.location, *e.attendees)), key=lambda e: e.start
    )
    return "\n".join(_line(e) for e in found) if found else f"no events match {query!r}"


@tool(APP)
def create_event(
    world: World, title: str, start: str, end: str, attendees: Sequence[str] = (), location: str = ""
) -> str:
    """Create a calendar event.

    Args:
        title: the event title.
        start: start date-time in ISO format, e.g. "2026-03-04T10:00:00".
        end: end date-time in ISO format; must be after start.
        attendees: optional attendee names or addresses.
        location: optional location.

    Returns "created ID: TITLE (START to END)".
    """
    calendar = load_app_state(world, STATE, Calendar)
    begins, ends = parse_timestamp(start, "start"), parse_timestamp(end, "end")
    if ends <= begins:
        raise ToolError(f"end {end!r} must be after start {start!r}")
    event_id = next_id("e", [e.id for e in calendar.events])
    calendar.events.append(
        Event(id=event_id, title=title, start=begins, end=ends, attendees=list(attendees), location=location)
    )
    save_app_state(world, STATE, calendar)
    return f"created {event_id}: {title} ({begins.isoformat()} to {ends.isoformat()})"
