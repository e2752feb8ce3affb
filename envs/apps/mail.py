"""mail: the world's mailbox (``apps_data/mail/mailbox.json``, attachments under ``apps_data/mail/attachments/``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from pydantic import ConfigDict, Field

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
from envs.files import atomic_write_bytes, read_regular_bytes
from envs.paths import resolve_inside

APP = "mail"
STATE = "mail/mailbox.json"
DEFAULT_USER = "me"


class Message(AppRecord):
    model_config = ConfigDict(populate_by_name=True)  # merged with AppRecord's: unknown fields kept

    id: str
    folder: str
    thread_id: str = ""
    sender: str = Field(alias="from")
    to: list[str]
    cc: list[str] = Field(default_factory=list)
    date: Timestamp
    subject: str
    body: str
    attachments: list[str] = Field(default_factory=list)


class Mailbox(AppRecord):
    """The mailbox; ``user`` (optional) is the address the world's user sends from."""

    user: str = DEFAULT_USER
    messages: list[Message]


def _attachments_dir(world: World, message_id: str) -> Path:
    return resolve_inside(world.apps_root / "mail" / "attachments", message_id)


def _find(mailbox: Mailbox, message_id: str) -> Message:
    found = next((m for m in mailbox.messages if m.id == message_id), None)
    if found is None:
        raise ToolError(f"no message with id {message_id!r}; find ids with mail.list_messages or mail.search_messages")
    return found


def _summary(message: Message) -> str:
    return f"{message.id} | {message.date.isoformat()} | {message.sender} | {message.subject}"


@tool(APP)
def list_messages(world: World, folder: str = "inbox") -> str:
    """List the messages of a mail folder, newest first.

    Args:
        folder: "inbox" (default) or "sent".

    Returns one "id | date | from | subject" line per message; read one with mail.read_message.
    """
    mailbox = load_app_state(world, STATE, Mailbox)
    folders = sorted({"inbox", "sent", *(m.folder for m in mailbox.messages)})
    if folder not in folders:
        raise ToolError(f"no mail folder {folder!r}; folders are: {', '.join(folders)}")
    chosen = sorted((m for m in mailbox.messages if m.folder == folder), key=lambda m: m.date, reverse=True)
    return "\n".join(_summary(m) for m in chosen) if chosen else f"(folder {folder!r} is empty)"


@tool(APP)
def read_message(world: World, message_id: str) -> str:
    """Read one email: its headers, body and attachment names.

    Args:
        message_id: the message id, e.g. "m001" (see mail.list_messages).

    Returns From/To/Cc/Date/Subject/Folder/Thread headers, the attachment names (save one into the filesystem with
    mail.save_attachment), then the body.
    """
    message = _find(load_app_state(world, STATE, Mailbox), message_id)
    headers = [
        f"From: {message.sender}",
        f"To: {', '.join(message.to)}",
        f"Cc: {', '.join(message.cc)}" if message.cc else "",
        f"Date: {message.date.isoformat()}",
        f"Subject: {message.subject}",
        f"Folder: {message.folder}",
        f"Thread: {message.thread_id}" if message.thread_id else "",
        f"Attachments: {', '.join(message.attachments) if message.attachments else '(none)'}",
    ]
    return "\n".join(h for h in headers if h) + f"\n\n{message.body}"


@tool(APP)
def search_messages(world: World, query: str) -> str:
    """Search all mail folders for messages containing every word of a query (case-insensitive).

    Args:
        query: one or more words; a message matches when each word occurs in its sender, recipients, subject, body
            or attachment names.

    Returns matching "id | date | from | subject" lines, newest first, or a note that nothing matched.
    """
    mailbox = load_app_state(world, STATE, Mailbox)
    found = [m for m in mailbox.messages if matches(query, m.sender, *m.to, *m.cc, m.subject, m.body, *m.attachments)]
    found.sort(key=lambda m: m.date, reverse=True)
    return "\n".join(_summary(m) for m in found) if found else f"no messages match {query!r}"


@tool(APP)
def save_attachment(world: World, message_id: str, filename: str, dest_path: str) -> str:
    """Save an email attachment into the company filesystem.

    Args:
        message_id: the message id, e.g. "m001".
        filename: the attachment name as listed by mail.read_message.
        dest_path: destination relative to the filesystem root: a file path, or an existing folder (or one ending in
            "/") to keep the attachment's name.

    Returns "saved FILENAME from MESSAGE_ID to DEST".
    """
    message = _find(load_app_state(world, STATE, Mailbox), message_id)
    if filename not in message.attachments:
        listed = ", ".join(message.attachments) or "(none)"
        raise ToolError(f"message {message_id} has no attachment {filename!r}; its attachments are: {listed}")
    source = resolve_inside(_attachments_dir(world, message_id), filename)
    if not source.is_file():
        raise ToolError(f"the attachment {filename!r} of {message_id} is listed but its file is missing from the world")
    dest = world.path(dest_path)
    if dest.is_dir() or dest_path.endswith("/"):
        dest = resolve_inside(dest, Path(filename).name)
    atomic_write_bytes(dest, read_regular_bytes(source))
    return f"saved {filename} from {message_id} to {world.rel(dest)}"


@tool(APP)
def send_message(
    world: World,
    to: Annotated[list[str], Field(min_length=1)],
    subject: str,
    body: str,
    attachments: Sequence[str] = (),
) -> str:
    """Send an email from the user's account; it is stored in the "sent" folder.

    Args:
        to: recipient addresses (at least one).
        subject: the subject line.
        body: the message text.
        attachments: optional file paths relative to the filesystem root to attach.

    Returns "sent message ID to RECIPIENTS".
    """
    mailbox = load_app_state(world, STATE, Mailbox)
    files = [world.path(p) for p in attachments]
    for path, file in zip(attachments, files, strict=True):
        if not file.is_file():
            raise ToolError(f"cannot attach {path!r}: no such file in the filesystem")
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise ToolError(f"attachments must have distinct file names, got: {', '.join(names)}")
    message_id = next_id("m", [m.id for m in mailbox.messages])
    for file in files:
        atomic_write_bytes(_attachments_dir(world, message_id) / file.name, read_regular_bytes(file))
    mailbox.messages.append(
        Message(
            id=message_id,
            folder="sent",
            thread_id=next_id("t", [m.thread_id for m in mailbox.messages]),
            sender=mailbox.user,
            to=to,
            date=now(),
            subject=subject,
            body=body,
            attachments=names,
        )
    )
    save_app_state(world, STATE, mailbox)
    return f"sent message {message_id} to {', '.join(to)}"
