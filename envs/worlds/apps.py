"""The app data of a world before it is written: mail, chat and calendar entries, keyed so that facts and tasks can
name them (``mail:<key>``) before ``generate_world`` assigns their ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time


@dataclass(frozen=True)
class MailSpec:
    key: str
    thread: str
    folder: str
    sender: str
    to: list[str]
    sent: datetime
    subject: str
    body: str
    cc: list[str] = field(default_factory=list)
    attachments: list[str] = field(default_factory=list)
    """filesystem paths whose bytes are attached (stored under the attachment's base name)"""


@dataclass(frozen=True)
class ChatSpec:
    key: str
    channel: str
    user: str
    ts: datetime
    text: str


@dataclass(frozen=True)
class EventSpec:
    key: str
    title: str
    start: datetime
    end: datetime
    attendees: list[str]
    location: str
    description: str


def at(day: date, hour: int, minute: int = 0) -> datetime:
    """``hour:minute`` on ``day``: when a message is sent or an event starts (naive local time, as the apps show it)."""
    return datetime.combine(day, time(hour, minute))
