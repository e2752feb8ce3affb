"""mail: list, read, search, save attachments, send (with attachments); errors; path escapes."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from envs.apps import ToolError, World, call_tool


def run(world: World, op: str, **args: object) -> str:
    return call_tool(world, f"mail.{op}", args)


def mailbox(world: World) -> dict:
    return json.loads((world.apps_root / "mail" / "mailbox.json").read_text())


def test_list_messages_newest_first(world: World) -> None:
    assert run(world, "list_messages").splitlines() == [
        "m002 | 2026-03-03T11:00:00 | bo@beta.com | Diligence call",
        "m001 | 2026-03-02T09:15:00 | ana@acme.com | Term sheet",
    ]
    assert run(world, "list_messages", folder="sent") == "m003 | 2026-03-02T10:00:00 | me@falcon.com | Re: Term sheet"
    with pytest.raises(ToolError, match=r"no mail folder 'drafts'; folders are: inbox, sent"):
        run(world, "list_messages", folder="drafts")


def test_read_message(world: World) -> None:
    assert run(world, "read_message", message_id="m002") == (
        "From: bo@beta.com\nTo: me@falcon.com\nCc: ana@acme.com\nDate: 2026-03-03T11:00:00\nSubject: Diligence call\n"
        "Folder: inbox\nThread: t02\nAttachments: (none)\n\nCan we move the diligence call to Thursday?"
    )
    assert "Attachments: terms.txt" in run(world, "read_message", message_id="m001")
    with pytest.raises(ToolError, match=r"no message with id 'm999'"):
        run(world, "read_message", message_id="m999")


def test_search_messages(world: World) -> None:
    assert run(world, "search_messages", query="TERM sheet").splitlines() == [  # newest first, every folder
        "m003 | 2026-03-02T10:00:00 | me@falcon.com | Re: Term sheet",
        "m001 | 2026-03-02T09:15:00 | ana@acme.com | Term sheet",
    ]
    assert run(world, "search_messages", query="terms.txt").startswith("m001 ")  # attachment names are searched
    assert run(world, "search_messages", query="thursday ana").startswith("m002 ")  # body + cc
    assert "no messages match" in run(world, "search_messages", query="invoice")


def test_save_attachment_to_file_and_folder(world: World) -> None:
    assert run(world, "save_attachment", message_id="m001", filename="terms.txt", dest_path="inbox/t.txt") == (
        "saved terms.txt from m001 to inbox/t.txt"
    )
    assert (world.fs_root / "inbox" / "t.txt").read_text() == "Price: 412.5\n"
    assert run(world, "save_attachment", message_id="m001", filename="terms.txt", dest_path="notes") == (
        "saved terms.txt from m001 to notes/terms.txt"
    )
    assert run(world, "save_attachment", message_id="m001", filename="terms.txt", dest_path=".") == (
        "saved terms.txt from m001 to terms.txt"
    )


def test_save_attachment_errors(world: World) -> None:
    with pytest.raises(ToolError, match=r"has no attachment 'term.txt'; its attachments are: terms.txt"):
        run(world, "save_attachment", message_id="m001", filename="term.txt", dest_path="x.txt")
    with pytest.raises(ToolError, match=r"no message with id 'm404'"):
        run(world, "save_attachment", message_id="m404", filename="terms.txt", dest_path="x.txt")


def test_send_message_with_attachment(world: World) -> None:
    sent = run(
        world,
        "send_message",
        to=["ana@acme.com"],
        subject="Model",
        body="See attached.",
        attachments=["models/model.xlsx"],
    )
    assert sent == "sent message m004 to ana@acme.com"
    stored = mailbox(world)["messages"][-1]
    assert stored["from"] == "me@falcon.com" and stored["folder"] == "sent" and stored["attachments"] == ["model.xlsx"]
    assert stored["thread_id"] == "t03"
    copy = world.apps_root / "mail" / "attachments" / "m004" / "model.xlsx"
    assert copy.read_bytes() == world.path("models/model.xlsx").read_bytes()
    assert "m004" in run(world, "list_messages", folder="sent")
    assert "Attachments: model.xlsx" in run(world, "read_message", message_id="m004")


def test_send_message_errors(world: World) -> None:
    with pytest.raises(ToolError, match=r"argument 'to'"):
        run(world, "send_message", to=[], subject="s", body="b")
    with pytest.raises(ToolError, match=r"argument 'to'"):
        run(world, "send_message", to="ana@acme.com", subject="s", body="b")
    with pytest.raises(ToolError, match=r"cannot attach 'nope.pdf'"):
        run(world, "send_message", to=["a@b.c"], subject="s", body="b", attachments=["nope.pdf"])
    assert len(mailbox(world)["messages"]) == 3  # nothing was sent


def test_missing_and_malformed_mailbox(world: World) -> None:
    path = world.apps_root / "mail" / "mailbox.json"
    path.write_text('{"messages": [{"id": "m1"}]}')
    with pytest.raises(ToolError, match=r"apps_data/mail/mailbox.json is malformed"):
        run(world, "list_messages")
    path.unlink()
    with pytest.raises(ToolError, match=r"this world has no mail data"):
        run(world, "list_messages")


@pytest.mark.parametrize("where", ["dest", "attachment"])
def test_paths_cannot_leave_the_world(world: World, escaping_path: Callable[[str], str], where: str) -> None:
    bad = escaping_path(".txt")
    with pytest.raises(ToolError, match=r"absolute paths are not allowed|path leaves the world root"):
        if where == "dest":
            run(world, "save_attachment", message_id="m001", filename="terms.txt", dest_path=bad)
        else:
            run(world, "send_message", to=["a@b.c"], subject="s", body="b", attachments=[bad])
