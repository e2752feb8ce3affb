"""slides: read a deck (titles, bullets, tables), add slides (also to a new deck), errors, path escapes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pptx import Presentation

from envs.apps import ToolError, World, call_tool
from envs.apps.slides import deck_text

DECK = "decks/deck.pptx"


def run(world: World, op: str, **args: object) -> str:
    return call_tool(world, f"slides.{op}", args)


def test_read_deck(world: World) -> None:
    assert run(world, "read_deck", path=DECK) == (
        "Slide 1: Falcon overview\nBuyer: Acme\nPrice: $412.5m\n\n"
        "Slide 2: Numbers\n| Metric | Value |\n| EBITDA | 262.5 |"
    )


def test_deck_text_for_graders(world: World) -> None:
    assert deck_text(world.path(DECK)).splitlines() == [
        "Falcon overview",
        "Buyer: Acme",
        "Price: $412.5m",
        "Numbers",
        "Metric",
        "Value",
        "EBITDA",
        "262.5",
    ]


def test_add_slide_to_existing_deck(world: World) -> None:
    assert run(world, "add_slide", path=DECK, title="Next steps", bullets=["Sign SPA", "Close in Q2"]) == (
        "added slide 3 to decks/deck.pptx"
    )
    assert run(world, "read_deck", path=DECK).endswith("Slide 3: Next steps\nSign SPA\nClose in Q2")
    assert len(Presentation(world.path(DECK)).slides) == 3


def test_add_slide_creates_a_missing_deck(world: World) -> None:
    assert run(world, "add_slide", path="out/new.pptx", title="Hello", bullets=[]) == "added slide 1 to out/new.pptx"
    assert run(world, "read_deck", path="out/new.pptx") == "Slide 1: Hello"


def test_errors(world: World) -> None:
    with pytest.raises(ToolError, match=r"no file 'decks/dek.pptx'.*deck.pptx"):
        run(world, "read_deck", path="decks/dek.pptx")
    with pytest.raises(ToolError, match=r"must end in .pptx"):
        run(world, "add_slide", path="decks/deck.ppt", title="t", bullets=[])
    with pytest.raises(ToolError, match=r"argument 'bullets'"):
        run(world, "add_slide", path=DECK, title="t", bullets=[1, 2])
    (world.fs_root / "decks" / "broken.pptx").write_text("nope")
    with pytest.raises(ToolError, match=r"cannot open broken.pptx as a PowerPoint deck"):
        run(world, "add_slide", path="decks/broken.pptx", title="t", bullets=[])


@pytest.mark.parametrize("op", ["read_deck", "add_slide"])
def test_paths_cannot_leave_the_world(world: World, escaping_path: Callable[[str], str], op: str) -> None:
    extra = {"title": "t", "bullets": []} if op == "add_slide" else {}
    with pytest.raises(ToolError, match=r"absolute paths are not allowed|path leaves the world root"):
        run(world, op, path=escaping_path(".pptx"), **extra)
