"""A tiny world with one file of each kind, built once with the same libraries the apps use and copied per test.

Hand-computed facts the tests rely on:
- models/model.xlsx, sheet Inputs: B2 price 2.5, B3 volume 165. Sheet Model: B2 revenue = Inputs!B2*Inputs!B3 = 412.5,
  B3 costs 150, B4 EBITDA = B2-B3 = 262.5, B5 = MEDIAN(B2:B4) = 262.5, B6 = SUM(B2:B3) = 562.5, B7 = B3/0 (#DIV/0!),
  B8 = FOOBAR(1) (unknown function), B9 = 'My Sheet'!A1*2 = 14.
- reports/report.pdf: page 1 has a full-width title and two columns of wrapped paragraphs
  (LEFT-1..LEFT-8, RIGHT-1..RIGHT-8); page 2 two full-width paragraphs (FULL-1, FULL-2) and a table
  Company/Revenue: Acme 412.5, Beta 99.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import docx
import openpyxl
import pytest
from pptx import Presentation
from pptx.util import Inches
from reportlab.lib import colors
from reportlab.lib.pagesizes import letter
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.platypus import (
    BaseDocTemplate,
    Frame,
    FrameBreak,
    NextPageTemplate,
    PageBreak,
    PageTemplate,
    Paragraph,
    TableStyle,
)
from reportlab.platypus import Table as PdfTable

from envs.apps import World

SUFFIXES = (".txt", ".xlsx", ".docx", ".pdf", ".pptx")
FILLER = "growth across regions, segments and products, with margins that held up well through the year."


def _xlsx(file: Path) -> None:
    book = openpyxl.Workbook()
    model = book.active
    model.title = "Model"
    rows = [
        ("Item", "FY2025"),
        ("Revenue", "=Inputs!B2*Inputs!B3"),
        ("Costs", 150),
        ("EBITDA", "=B2-B3"),
        ("Median", "=MEDIAN(B2:B4)"),
        ("Total", "=SUM(B2:B3)"),
        ("Broken", "=B3/0"),
        ("Unknown", "=FOOBAR(1)"),
        ("Spaced", "='My Sheet'!A1*2"),
    ]
    for row in rows:
        model.append(row)
    inputs = book.create_sheet("Inputs")
    inputs.append(("Driver", "Value"))
    inputs.append(("Price", 2.5))
    inputs.append(("Volume", 165))
    book.create_sheet("My Sheet")["A1"] = 7
    book.save(file)


def _docx(file: Path) -> None:
    document = docx.Document()
    document.add_heading("Falcon memo", level=0)
    document.add_paragraph("The purchase price is $412.5m.")
    paragraph = document.add_paragraph("Closing is ")
    paragraph.add_run("expected").bold = True
    paragraph.add_run(" in Q2.")
    table = document.add_table(rows=2, cols=2)
    for r, values in enumerate([("Party", "Role"), ("Acme", "Buyer")]):
        for c, value in enumerate(values):
            table.cell(r, c).text = value
    document.add_paragraph("Signed by Acme.")
    document.save(file)


def _pdf(file: Path) -> None:
    styles = getSampleStyleSheet()
    width, height = letter
    margin, gap = 54, 24
    column = (width - 2 * margin - gap) / 2
    title = Frame(margin, height - margin - 50, width - 2 * margin, 50, id="title")
    left = Frame(margin, margin, column, height - 2 * margin - 60, id="left")
    right = Frame(margin + column + gap, margin, column, height - 2 * margin - 60, id="right")
    full = Frame(margin, margin, width - 2 * margin, height - 2 * margin, id="full")
    doc = BaseDocTemplate(str(file), pagesize=letter)
    doc.addPageTemplates([PageTemplate("columns", [title, left, right]), PageTemplate("full", [full])])
    story = [Paragraph("Annual Report of Falcon Holdings", styles["Title"]), FrameBreak()]
    body = styles["BodyText"]
    story += [Paragraph(f"LEFT-{i} the left column discusses revenue {FILLER}", body) for i in range(1, 9)]
    story.append(FrameBreak())
    story += [Paragraph(f"RIGHT-{i} the right column discusses risk {FILLER}", body) for i in range(1, 9)]
    story += [NextPageTemplate("full"), PageBreak(), Paragraph("Revenue by company", styles["Heading2"])]
    story += [Paragraph(f"FULL-{i} a full-width paragraph on revenue {FILLER} {FILLER}", body) for i in (1, 2)]
    table = PdfTable([["Company", "Revenue"], ["Acme", "412.5"], ["Beta", "99"]])
    table.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black)]))
    story.append(table)
    doc.build(story)


def _pptx(file: Path) -> None:
    deck = Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[1])
    first.shapes.title.text = "Falcon overview"
    body = first.placeholders[1].text_frame
    body.text = "Buyer: Acme"
    body.add_paragraph().text = "Price: $412.5m"
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Numbers"
    table = second.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(6), Inches(1)).table
    for r, values in enumerate([("Metric", "Value"), ("EBITDA", "262.5")]):
        for c, value in enumerate(values):
            table.cell(r, c).text = value
    deck.save(file)


def _apps_data(root: Path) -> None:
    mail = root / "mail"
    (mail / "attachments" / "m001").mkdir(parents=True)
    (mail / "attachments" / "m001" / "terms.txt").write_text("Price: 412.5\n")
    message = {"cc": [], "attachments": []}
    messages = [
        message
        | {
            "id": "m001",
            "folder": "inbox",
            "thread_id": "t01",
            "from": "ana@acme.com",
            "to": ["me@falcon.com"],
            "date": "2026-03-02T09:15:00",
            "subject": "Term sheet",
            "body": "Attached the term sheet for Falcon.",
            "attachments": ["terms.txt"],
        },
        message
        | {
            "id": "m002",
            "folder": "inbox",
            "thread_id": "t02",
            "from": "bo@beta.com",
            "to": ["me@falcon.com"],
            "cc": ["ana@acme.com"],
            "date": "2026-03-03T11:00:00",
            "subject": "Diligence call",
            "body": "Can we move the diligence call to Thursday?",
        },
        message
        | {
            "id": "m003",
            "folder": "sent",
            "thread_id": "t01",
            "from": "me@falcon.com",
            "to": ["ana@acme.com"],
            "date": "2026-03-02T10:00:00",
            "subject": "Re: Term sheet",
            "body": "Thanks, reviewing.",
        },
    ]
    (mail / "mailbox.json").write_text(json.dumps({"user": "me@falcon.com", "messages": messages}))
    (root / "chat").mkdir()
    channels = [
        {
            "name": "deal-team",
            "messages": [
                {"id": "c001", "user": "ana", "ts": "2026-03-02T09:00:00", "text": "Model is in models/model.xlsx"},
                {"id": "c002", "user": "bo", "ts": "2026-03-02T09:30:00", "text": "EBITDA looks low"},
            ],
        },
        {
            "name": "general",
            "messages": [
                {"id": "c003", "user": "cy", "ts": "2026-03-01T08:00:00", "text": "Welcome to Falcon"},
            ],
        },
    ]
    (root / "chat" / "channels.json").write_text(json.dumps({"channels": channels}))
    (root / "calendar").mkdir()
    events = [
        {
            "id": "e001",
            "title": "Falcon kickoff",
            "start": "2026-03-04T10:00:00",
            "end": "2026-03-04T11:00:00",
            "attendees": ["ana", "bo"],
            "location": "Room 1",
            "description": "Kick off the deal",
        },
        {
            "id": "e002",
            "title": "Diligence call",
            "start": "2026-03-05T14:00:00",
            "end": "2026-03-05T15:00:00",
            "attendees": ["bo"],
            "location": "",
            "description": "",
        },
        {
            "id": "e003",
            "title": "Board meeting",
            "start": "2026-03-10T09:00:00",
            "end": "2026-03-10T12:00:00",
            "attendees": [],
            "location": "HQ",
            "description": "Quarterly board",
        },
    ]
    (root / "calendar" / "events.json").write_text(json.dumps({"events": events}))


@pytest.fixture(scope="session")
def world_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("template")
    outside = base / "outside"
    outside.mkdir()
    root = base / "world"
    fs = root / "filesystem"
    for folder in ("notes", "models", "docs", "reports", "decks"):
        (fs / folder).mkdir(parents=True)
    (fs / "notes" / "readme.md").write_text("Project Falcon\nThe deal closes in Q2.\nContact: Ana\n")
    (fs / "notes" / "data.csv").write_text("company,revenue\nAcme,412.5\nBeta,99\n")
    _xlsx(fs / "models" / "model.xlsx")
    _docx(fs / "docs" / "memo.docx")
    _pdf(fs / "reports" / "report.pdf")
    _pptx(fs / "decks" / "deck.pptx")
    for suffix in SUFFIXES:  # symlinks inside the world that point outside it
        shutil.copy(fs / "notes" / "readme.md", outside / f"secret{suffix}")
        (fs / f"escape{suffix}").symlink_to(outside / f"secret{suffix}")
    _apps_data(root / "apps_data")
    return root


@pytest.fixture
def world(world_template: Path, tmp_path: Path) -> World:
    root = tmp_path / "world"
    shutil.copytree(world_template, root, symlinks=True)
    return World(root)


@pytest.fixture(params=["dotdot", "absolute", "symlink"])
def escaping_path(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """A function suffix -> a path argument that leaves the world: "../x", "/x" or a symlink pointing outside."""
    forms = {"dotdot": "../../outside/secret{}", "absolute": "/etc/secret{}", "symlink": "escape{}"}
    return forms[request.param].format
