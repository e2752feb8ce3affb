"""Generate worlds: pick the domain builder from the world id, render its content, write the app data.

``generate_world("ib-1", dest)`` writes ``dest/filesystem/`` and ``dest/apps_data/`` and returns the ``WorldFacts``.
The same ``(world_id, seed)`` always gives byte-identical files: the random stream is seeded from both, and the
renderers pin every timestamp.
"""

from __future__ import annotations

import random
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from envs.files import atomic_write_bytes
from envs.options import DEFAULT_WORLDS_PER_DOMAIN, HELDOUT_WORLD_INDEX
from envs.types import Domain
from envs.worlds.content import WorldContent
from envs.worlds.facts import ChatFact, EventFact, MessageFact, TextFact, WorldFacts
from envs.worlds.ib import build as build_ib
from envs.worlds.law import build as build_law
from envs.worlds.mc import build as build_mc
from envs.worlds.render import write_deck, write_document, write_json, write_pdf, write_workbook
from envs.worlds.sources import is_reference

Builder = Callable[[str, random.Random], WorldContent]

BUILDERS: dict[str, tuple[Domain, Builder]] = {
    "ib": (Domain.INVESTMENT_BANKING, build_ib),
    "mc": (Domain.MANAGEMENT_CONSULTING, build_mc),
    "law": (Domain.CORPORATE_LAW, build_law),
}


def world_ids(worlds_per_domain: int = DEFAULT_WORLDS_PER_DOMAIN) -> tuple[str, ...]:
    """``ib-1 … ib-n``, ``mc-1 …``, ``law-1 …``: n worlds per domain; n ≥ 3 so that world 3 is held out."""
    if worlds_per_domain < HELDOUT_WORLD_INDEX:
        raise ValueError(f"need at least {HELDOUT_WORLD_INDEX} worlds per domain (world 3 is held out)")
    return tuple(f"{prefix}-{index}" for prefix in BUILDERS for index in range(1, worlds_per_domain + 1))


WORLD_IDS = world_ids()

_WORLD_ID = re.compile(r"^(?P<prefix>[a-z]+)-(?P<index>[1-9][0-9]*)$")


def is_heldout_world(world_id: str) -> bool:
    return world_index(world_id) == HELDOUT_WORLD_INDEX


def world_index(world_id: str) -> int:
    """``ib-4`` → 4."""
    return int(_parse(world_id)[1])


def _parse(world_id: str) -> tuple[str, str]:
    match = _WORLD_ID.match(world_id)
    if match is None or match["prefix"] not in BUILDERS:
        raise ValueError(f"bad world id {world_id!r}: expected <domain>-<n> with domain one of {sorted(BUILDERS)}")
    return match["prefix"], match["index"]


def generate_world(world_id: str, dest: Path, seed: int = 0) -> WorldFacts:
    """Write world ``world_id`` into ``dest`` (replacing what was there) and return its ground truth."""
    prefix, _ = _parse(world_id)
    domain, builder = BUILDERS[prefix]
    content = builder(world_id, random.Random(f"{seed}:{world_id}"))
    if dest.exists():
        shutil.rmtree(dest)
    filesystem = dest / "filesystem"
    for workbook in content.workbooks:
        write_workbook(workbook, filesystem)
    for document in content.documents:
        write_document(document, filesystem)
    for deck in content.decks:
        write_deck(deck, filesystem)
    write_pdf(content.report.spec, filesystem)
    for text in content.texts.values():
        if is_reference(text):
            atomic_write_bytes(filesystem / text.source, (text.value + "\n").encode())
    messages, events, chats = _write_apps_data(content, dest)
    return WorldFacts(
        world_id=world_id,
        domain=domain,
        seed=seed,
        client=content.client,
        counterparty=content.counterparty,
        project=content.project,
        people=content.people,
        files=content.files,
        cells=content.cells,
        texts={key: _resolve_source(fact, messages, events, chats) for key, fact in content.texts.items()},
        pdf=content.report.facts,
        messages=messages,
        events=events,
        chats=chats,
        inputs=content.inputs,
    )


def generate_worlds(dest_root: Path, seed: int = 0, world_ids: Iterable[str] | None = None) -> dict[str, WorldFacts]:
    """Generate every world (default: the nine of ``WORLD_IDS``) into ``dest_root/<world_id>``; facts by world id."""
    return {world_id: generate_world(world_id, dest_root / world_id, seed) for world_id in (world_ids or WORLD_IDS)}


def _write_apps_data(content: WorldContent, dest: Path) -> tuple[list[MessageFact], list[EventFact], list[ChatFact]]:
    """Write mail (with attachment copies), chat and calendar JSON in the catalogue's layout; ids in list order."""
    apps = dest / "apps_data"
    messages, mailbox = [], []
    for number, spec in enumerate(content.mail, start=1):
        message_id = f"m{number:03d}"
        names = [Path(path).name for path in spec.attachments]
        for path, name in zip(spec.attachments, names, strict=True):
            atomic_write_bytes(
                apps / "mail" / "attachments" / message_id / name, (dest / "filesystem" / path).read_bytes()
            )
        mailbox.append(
            {"id": message_id, "folder": spec.folder, "thread_id": spec.thread, "from": spec.sender, "to": spec.to,
             "cc": spec.cc, "date": spec.sent.isoformat(), "subject": spec.subject, "body": spec.body,
             "attachments": names}
        )  # fmt: skip
        messages.append(
            MessageFact(key=spec.key, id=message_id, thread_id=spec.thread, folder=spec.folder, sender=spec.sender,
                        subject=spec.subject, date=spec.sent.isoformat(), attachments=names)
        )  # fmt: skip
    write_json(apps / "mail" / "mailbox.json", {"messages": mailbox})

    chats, channels = [], {}
    for number, spec in enumerate(content.chat, start=1):
        chat_id = f"c{number:03d}"
        channels.setdefault(spec.channel, []).append(
            {"id": chat_id, "user": spec.user, "ts": spec.ts.isoformat(), "text": spec.text}
        )
        chats.append(
            ChatFact(key=spec.key, channel=spec.channel, id=chat_id, user=spec.user, ts=spec.ts.isoformat(),
                     text=spec.text)
        )  # fmt: skip
    write_json(
        apps / "chat" / "channels.json",
        {"channels": [{"name": name, "messages": items} for name, items in channels.items()]},
    )

    events, calendar = [], []
    for number, spec in enumerate(content.events, start=1):
        event_id = f"e{number:03d}"
        calendar.append(
            {"id": event_id, "title": spec.title, "start": spec.start.isoformat(), "end": spec.end.isoformat(),
             "attendees": spec.attendees, "location": spec.location, "description": spec.description}
        )  # fmt: skip
        events.append(
            EventFact(key=spec.key, id=event_id, title=spec.title, start=spec.start.isoformat(),
                      end=spec.end.isoformat(), location=spec.location, attendees=spec.attendees)
        )  # fmt: skip
    write_json(apps / "calendar" / "events.json", {"events": calendar})
    return messages, events, chats


def _resolve_source(
    fact: TextFact, messages: list[MessageFact], events: list[EventFact], chats: list[ChatFact]
) -> TextFact:
    """Rewrite an app source written with a spec key (``mail:net_debt``) to the assigned id (``mail:m004``)."""
    app, _, key = fact.source.partition(":")
    if app == "mail":
        source = f"mail:{next(m.id for m in messages if m.key == key)}"
    elif app == "chat":
        chat = next(c for c in chats if c.key == key)
        source = f"chat:{chat.channel}:{chat.id}"
    elif app == "calendar":
        source = f"calendar:{next(e.id for e in events if e.key == key)}"
    else:
        return fact
    return fact.model_copy(update={"source": source})
