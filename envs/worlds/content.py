"""Shared building blocks of world content: name pools, people, dates, Excel rounding and the ``WorldContent`` spec.

A domain module (``ib``, ``mc``, ``law``) turns a seeded ``random.Random`` into a ``WorldContent``: the specs of the
files to render, the app data (mail, chat, calendar) and the ground-truth facts. The parts every domain shapes the
same way live here too: the pdf ``Report`` with its facts, the one-value ``ReferenceFile``s and the deck's title
slide. Nothing here touches the disk.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal

from envs.worlds.facts import CellFact, DomainInputs, PdfFacts, Person, TextFact
from envs.worlds.render import DeckSpec, DocSpec, PdfSpec, SheetSpec, SlideSpec, WorkbookSpec

FIRST_NAMES = [
    "Amara", "Benedikt", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hiroshi", "Ines", "Jonas", "Keisha", "Lorenzo",
    "Maya", "Nikhil", "Olivia", "Pavel", "Quinn", "Rosa", "Samuel", "Tamsin", "Umar", "Valeria", "Wei", "Yusuf", "Zara",
]  # fmt: skip
LAST_NAMES = [
    "Achebe", "Brandt", "Castillo", "Dubois", "Eriksen", "Fontaine", "Gallagher", "Haddad", "Ivanova", "Jensen",
    "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Okafor", "Petrov", "Quintero", "Rahman", "Sorensen", "Tanaka",
    "Ueda", "Varga", "Whitfield", "Yamamoto", "Zielinski",
]  # fmt: skip
NAME_STEMS = [
    "Alder", "Brightwater", "Cobalt", "Dunmore", "Everline", "Fairhaven", "Granite", "Halcyon", "Ironbridge",
    "Juniper", "Kestrel", "Lumen", "Meridian", "Northwind", "Oakridge", "Pinecrest", "Quarry", "Redfern", "Silverline",
    "Thornbury", "Upland", "Vantage", "Westbrook", "Yarrow",
]  # fmt: skip
CITIES = ["Rotterdam", "Leipzig", "Gdansk", "Lyon", "Porto", "Tampere", "Brno", "Bilbao", "Aarhus", "Turin"]
CODENAMES = ["Falcon", "Granite", "Harbor", "Juniper", "Kestrel", "Lantern", "Mistral", "Nimbus", "Orion", "Sable"]


def excel_round(value: float, digits: int) -> float:
    """Excel's ``ROUND``: half away from zero on the decimal text of the float (``Decimal(repr(value))``)."""
    quantum = Decimal(1).scaleb(-digits)
    return float(Decimal(repr(value)).quantize(quantum, rounding=ROUND_HALF_UP))


def near_tie(value: float, digits: int) -> bool:
    """True when ``value`` sits within 1e-6 of a rounding tie at ``digits``; such inputs are resampled so that any
    evaluator (half-up or banker's, float or decimal) rounds the model the same way."""
    scaled = abs(value) * 10**digits
    return abs(scaled - int(scaled) - 0.5) < 1e-6


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


@dataclass(frozen=True)
class Report:
    """The world's pdf report and the facts a task may ask about it."""

    spec: PdfSpec
    facts: PdfFacts


def report(spec: PdfSpec, wrapped_sentence: str, wrapped_value: str, wrapped_label: str) -> Report:
    """``spec`` with its facts: ``wrapped_sentence`` (part of the left column) states ``wrapped_value``; the page
    numbers are those of ``render.write_pdf``'s layout (columns on page 2, the table on page 3)."""
    facts = PdfFacts(
        path=spec.path, columns_page=2, wrapped_sentence=wrapped_sentence, wrapped_value=wrapped_value,
        wrapped_label=wrapped_label, table_page=3, table_header=spec.table[0], table_rows=spec.table[1:],
    )  # fmt: skip
    return Report(spec, facts)


@dataclass(frozen=True)
class ReferenceFile:
    """A one-value text file (``reference/<name>.txt``) and the ``TextFact`` it holds, recorded under ``key``."""

    key: str
    label: str
    path: str
    value: str

    def fact(self) -> TextFact:
        return TextFact(label=self.label, source=self.path, value=self.value)


@dataclass
class WorldContent:
    """Everything one world holds, before rendering. ``texts`` are the facts beyond the reference files; values
    sourced from apps use the spec's key (``mail:<key>``), which ``generate_world`` rewrites to the assigned ids."""

    client: str
    counterparty: str
    project: str
    people: list[Person]
    files: dict[str, str]
    workbooks: list[WorkbookSpec]
    documents: list[DocSpec]
    decks: list[DeckSpec]
    report: Report
    references: list[ReferenceFile]
    mail: list[MailSpec]
    chat: list[ChatSpec]
    events: list[EventSpec]
    cells: dict[str, CellFact]
    texts: dict[str, TextFact]
    inputs: DomainInputs


def company_names(rng: random.Random, count: int, suffixes: list[str]) -> list[str]:
    """``count`` distinct company names such as "Kestrel Logistics"."""
    stems = rng.sample(NAME_STEMS, count)
    return [f"{stem} {rng.choice(suffixes)}" for stem in stems]


def make_people(rng: random.Random, roles: list[tuple[str, str]]) -> list[Person]:
    """One person per (role, email domain), with distinct first and last names."""
    firsts = rng.sample(FIRST_NAMES, len(roles))
    lasts = rng.sample(LAST_NAMES, len(roles))
    return [
        Person(name=f"{first} {last}", role=role, email=f"{first.lower()}.{last.lower()}@{domain}")
        for (role, domain), first, last in zip(roles, firsts, lasts, strict=True)
    ]


def email_domain(company: str, suffix: str) -> str:
    """A company's mail domain: its first word, lower-cased, then ``suffix`` (Kestrel Capital, "capital.com" →
    kestrelcapital.com)."""
    return company.split()[0].lower() + suffix


def base_day(rng: random.Random) -> date:
    """A Monday in March or April 2026: the day the world's story is set around."""
    return date(2026, 3, 2) + timedelta(weeks=rng.randrange(0, 6))


def at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute))


def title_slide(title: str, adviser: str, client: str, day: date) -> SlideSpec:
    """A deck's opening slide: the title, who prepared it for whom, and the date."""
    return SlideSpec(title, [f"{adviser} for {client}", day.strftime("%d %B %Y")])


def money(value: float, digits: int = 1) -> str:
    """Thousands separators and fixed decimals, as written in prose and tables: 1,234.5."""
    return f"{value:,.{digits}f}"


class SheetBuilder:
    """Collects one worksheet's cells and, for the cells a task may ask about, their ground-truth ``CellFact``.

    ``put(address, value, fact=..., computed=...)``: ``value`` is what is written (a constant or an ``=`` formula);
    ``computed`` is the value the formula evaluates to, computed in Python from the same inputs (required for a
    formula that is recorded as a fact).
    """

    def __init__(self, path: str, name: str, facts: dict[str, CellFact]) -> None:
        self.path, self.name, self._facts = path, name, facts
        self.cells: dict[str, object] = {}
        self.number_formats: dict[str, str] = {}
        self.bold: list[str] = []

    def put(
        self,
        address: str,
        value: object,
        *,
        fact: str | None = None,
        label: str = "",
        computed: float | int | str | None = None,
        unit: str = "",
        number_format: str | None = None,
        bold: bool = False,
    ) -> None:
        self.cells[address] = value
        if number_format:
            self.number_formats[address] = number_format
        if bold:
            self.bold.append(address)
        if fact is None:
            return
        is_formula = isinstance(value, str) and value.startswith("=")
        if is_formula and computed is None:
            raise ValueError(f"fact {fact!r} ({self.name}!{address}) is a formula: pass its computed value")
        if fact in self._facts:
            raise ValueError(f"fact {fact!r} recorded twice")
        self._facts[fact] = CellFact(
            label=label,
            path=self.path,
            sheet=self.name,
            cell=address,
            # A date cell's fact is its ISO date: the sheets app shows it as that date (at midnight).
            value=computed if is_formula else value.isoformat() if isinstance(value, date) else value,  # type: ignore
            formula=value if is_formula else None,  # type: ignore[arg-type]
            unit=unit,
        )

    def row(self, row: int, values: list[object], first_column: int = 1, bold: bool = False) -> None:
        """Write ``values`` left to right from ``first_column`` (1 = A) in ``row``, no facts recorded."""
        for offset, value in enumerate(values):
            self.put(f"{column_letter(first_column + offset)}{row}", value, bold=bold)

    def spec(self, widths: dict[str, float] | None = None) -> SheetSpec:
        return SheetSpec(self.name, dict(self.cells), dict(self.number_formats), tuple(self.bold), widths or {})


def column_letter(index: int) -> str:
    """1 → A, 27 → AA."""
    letters = ""
    while index:
        index, remainder = divmod(index - 1, 26)
        letters = chr(ord("A") + remainder) + letters
    return letters
