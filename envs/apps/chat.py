"""chat: the world's team chat (``apps_data/chat/channels.json``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from envs.apps.base import (
    AppRecord,
    Timestamp,
    ToolError,
    World,
    load_app_state,
    matches,
    next_id,
    now,
    save_app_state,
    tool,
)

APP = "chat"
STATE = "chat/channels.json"
DEFAULT_USER = "me"


class ChatMessage(AppRecord):
    id: str
    user: str
    ts: Timestamp
    text: str


class Channel(AppRecord):
    name: str
    messages: list[ChatMessage] = Field(default_factory=list)


class Chat(AppRecord):
    """All channels; ``user`` (optional) is the name the world's user posts as."""

    user: str = DEFAULT_USER
    channels: list[Channel]


def _line(message: ChatMessage) -> str:
    return f"{message.ts.isoformat()} | {message.user}: {message.text}"


def _channel(chat: Chat, name: str) -> Channel:
    wanted = name.strip().removeprefix("#")
    found = next((c for c in chat.channels if c.name == wanted), None)
    if found is None:
        raise ToolError(f"no channel {name!r}; channels are: {', '.join(c.name for c in chat.channels)}")
    return found


@tool(APP)
def list_channels(world: World) -> str:
    """List the chat channels.

    Returns one "name (N messages)" line per channel.
    """
    chat = load_app_state(world, STATE, Chat)
    lines = [f"{c.name} ({len(c.messages)} messages)" for c in chat.channels]
    return "\n".join(lines) if lines else "(no channels)"


@tool(APP)
def read_channel(world: World, channel: str, limit: Annotated[int, Field(ge=1)] = 50) -> str:
    """Read the latest messages of a chat channel, oldest first.

    Args:
        channel: the channel name, with or without "#" (see chat.list_channels).
        limit: how many of the most recent messages to show (default 50).

    Returns one "ts | user: text" line per message.
    """
    found = _channel(load_app_state(world, STATE, Chat), channel)
    recent = sorted(found.messages, key=lambda m: m.ts)[-limit:]
    return "\n".join(_line(m) for m in recent) if recent else f"(#{found.name} has no messages)"


@tool(APP)
def search_messages(world: World, query: str) -> str:
    """Search every chat channel for messages containing every word of a query (case-insensitive).

    Args:
        query: one or more words; a message matches when each word occurs in its text or author.

    Returns matching "channel | ts | user: text" lines in time order, or a note that nothing matched.
    """
    chat = load_app_state(world, STATE, Chat)
    found = [(c.name, m) for c in chat.channels for m in c.messages if matches(query, m.user, m.text)]
    found.sort(key=lambda pair: pair[1].ts)
    return "\n".join(f"{name} | {_line(m)}" for name, m in found) if found else f"no chat messages match {query!r}"


@tool(APP)
def post_message(world: World, channel: str, text: Annotated[str, Field(min_length=1)]) -> str:
    """Post a message to a chat channel as the world's user.

    Args:
        channel: the channel name, with or without "#".
        text: the message text.

    Returns "posted ID to #channel".
    """
    chat = load_app_state(world, STATE, Chat)
    found = _channel(chat, channel)
    message_id = next_id("c", [m.id for c in chat.channels for m in c.messages])
    found.messages.append(ChatMessage(id=message_id, user=chat.user, ts=now(), text=text))
    save_app_state(world, STATE, chat)
    return f"posted {message_id} to #{found.name}"
