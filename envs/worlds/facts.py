"""Ground truth of a generated world: what the task generators may ask about, and where it lives.

Every value here was computed in Python from the same inputs that were written into the world's files, so a task
built from a ``WorldFacts`` has exactly one right answer. Paths are relative to the world's ``filesystem/``.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from envs.types import Domain


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Person(_Fact):
    name: str
    role: str
    email: str


class CellFact(_Fact):
    """One spreadsheet cell: its address, its computed value and (for formula cells) the formula written."""

    label: str
    path: str
    sheet: str
    cell: str
    value: float | int | str
    formula: str | None = None
    unit: str = ""


class TextFact(_Fact):
    """A value stated somewhere other than a cell: ``source`` is a file path, ``mail:<id>``, ``chat:<channel>:<id>``
    or ``calendar:<id>``."""

    label: str
    source: str
    value: str


class PdfFacts(_Fact):
    """The pdf report: a two-column page whose ``wrapped_sentence`` wraps inside the left column, and a table page."""

    path: str
    columns_page: int
    wrapped_sentence: str
    wrapped_value: str
    wrapped_label: str
    table_page: int
    table_header: list[str]
    table_rows: list[list[str]]


class MessageFact(_Fact):
    key: str
    id: str
    thread_id: str
    folder: str
    sender: str
    subject: str
    date: str
    attachments: list[str] = Field(default_factory=list)


class EventFact(_Fact):
    key: str
    id: str
    title: str
    start: str
    end: str
    location: str
    attendees: list[str]


class ChatFact(_Fact):
    key: str
    channel: str
    id: str
    user: str
    ts: str
    text: str


class IbInputs(_Fact):
    """Operating-model and valuation inputs of an investment-banking world (money in USD millions)."""

    kind: Literal["investment_banking"] = "investment_banking"
    years: list[str]
    base_revenue: float
    growth: list[float] = Field(description="revenue growth of each projected year (years[1:])")
    cogs_pct: list[float] = Field(description="COGS as a fraction of revenue, per year")
    opex_pct: float
    tax_rate: float
    comps: list[tuple[str, float, float]] = Field(description="(company, EV, EBITDA) per comparable")
    multiple: float = Field(description="EV/EBITDA multiple applied in the valuation (comps median, rounded)")
    net_debt: float


class McInputs(_Fact):
    """Market-sizing inputs and survey responses of a management-consulting world."""

    kind: Literal["management_consulting"] = "management_consulting"
    households_m: float
    category_share: float
    annual_spend: float
    premium_share: float
    client_share: float
    market_growth: float
    responses: list[tuple[str, str, str, int, int, float]] = Field(
        description="(respondent id, region, segment, satisfaction 1-10, recommend 0-10, monthly spend)"
    )


class LawInputs(_Fact):
    """Contract register rows and the matter budget of a corporate-law world (money in USD thousands)."""

    kind: Literal["corporate_law"] = "corporate_law"
    contracts: list[tuple[str, str, str, float, date, date, str, str]] = Field(
        description="(id, counterparty, type, value, start, end, status, change of control Yes/No)"
    )
    rates: list[tuple[str, float]] = Field(description="(role, hourly rate in USD)")
    phases: list[tuple[str, list[float]]] = Field(description="(phase, hours per role in rates order)")
    contingency: float


DomainInputs = Annotated[IbInputs | McInputs | LawInputs, Field(discriminator="kind")]


class WorldFacts(_Fact):
    """Everything a task generator needs about one world. ``cells``/``texts`` are keyed by a stable fact name."""

    world_id: str
    domain: Domain
    seed: int
    client: str
    counterparty: str
    project: str
    people: list[Person]
    files: dict[str, str] = Field(description="role of a file (e.g. 'model', 'memo') -> path")
    cells: dict[str, CellFact]
    texts: dict[str, TextFact]
    pdf: PdfFacts
    messages: list[MessageFact]
    events: list[EventFact]
    chats: list[ChatFact]
    inputs: DomainInputs

    def message(self, key: str) -> MessageFact:
        return _by_key(self.messages, key, f"{self.world_id} messages")

    def event(self, key: str) -> EventFact:
        return _by_key(self.events, key, f"{self.world_id} events")

    def chat(self, key: str) -> ChatFact:
        return _by_key(self.chats, key, f"{self.world_id} chat messages")


_Keyed = TypeVar("_Keyed", MessageFact, EventFact, ChatFact)


def _by_key(items: list[_Keyed], key: str, what: str) -> _Keyed:
    for item in items:
        if item.key == key:
            return item
    raise KeyError(f"no {key!r} among {what}; keys are: {[item.key for item in items]}")
