"""Shared building blocks of world content: name pools, people, dates, Excel rounding and the ``WorldContent`` spec.

A domain module (``ib``, ``mc``, ``law``) turns a seeded ``random.Random`` into a ``WorldContent``: the specs of the
files to render, the app data (mail, chat, calendar: ``apps``) and the ground-truth facts (cells: ``sheets``, the
rest: ``sources``); ``domain`` holds the skeleton they share. Nothing here touches the disk.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal

from envs.worlds.apps import ChatSpec, EventSpec, MailSpec
from envs.worlds.facts import CellFact, DomainInputs, Person, TextFact
from envs.worlds.render import DeckSpec, DocSpec, WorkbookSpec
from envs.worlds.sources import Report

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
CODENAMES = ["Falcon", "Granite", "Harbor", "Juniper", "Kestrel", "Lantern", "Mistral", "Nimbus", "Orion", "Sable"]


def excel_round(value: float, digits: int) -> float:
    """Excel's ``ROUND``: half away from zero on the decimal text of the float (``Decimal(repr(value))``)."""
    quantum = Decimal(1).scaleb(-digits)
    return float(Decimal(repr(value)).quantize(quantum, rounding=ROUND_HALF_UP))


def clean(value: float) -> float:
    """A computed float at the precision the sheets app prints (10 significant digits): what a formula cell's fact
    records, so that float noise in the Python arithmetic never reaches an expected value."""
    return float(f"{value:.10g}")


def near_tie(value: float, digits: int) -> bool:
    """True when ``value`` sits within 1e-6 of a rounding tie at ``digits``; such inputs are resampled so that any
    evaluator (half-up or banker's, float or decimal) rounds the model the same way."""
    scaled = abs(value) * 10**digits
    return abs(scaled - int(scaled) - 0.5) < 1e-6


@dataclass
class WorldContent:
    """Everything one world holds, before rendering. ``texts`` are the facts stated outside the workbooks, the
    reference files' first (the toy tasks are drawn in this order); values sourced from apps use the spec's key
    (``mail:<key>``), which ``generate_world`` rewrites to the assigned ids."""

    client: str
    counterparty: str
    project: str
    people: list[Person]
    files: dict[str, str]
    workbooks: list[WorkbookSpec]
    documents: list[DocSpec]
    decks: list[DeckSpec]
    report: Report
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


def money(value: float, digits: int = 1) -> str:
    """Thousands separators and fixed decimals, as written in prose and tables: 1,234.5."""
    return f"{value:,.{digits}f}"
