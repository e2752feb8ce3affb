"""The skeleton every domain's world shares, filled in by data: who is in it (``CastSpec``), and which function writes
each part of it (``DomainWorld``).

Every world is a client, a counterparty and an adviser with four people on the job and two outside it, working on a
project with a code name around one day; it holds two workbooks, two documents, a deck, a pdf report, reference
files, mail, chat and calendar. Only the names, roles, files and figures differ between domains, so a domain module
declares those and ``DomainWorld`` assembles the ``WorldContent`` the same way for all of them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Generic, TypeVar

from envs.worlds.apps import ChatSpec, EventSpec, MailSpec
from envs.worlds.content import CODENAMES, WorldContent, company_names, email_domain, make_people
from envs.worlds.facts import CellFact, IbInputs, LawInputs, McInputs, Person, TextFact
from envs.worlds.render import DeckSpec, DocSpec, SheetSpec, SlideSpec, WorkbookSpec
from envs.worlds.sources import Report


@dataclass(frozen=True)
class CastSpec:
    """A domain's cast as data: how many company names it draws (client and counterparty first) and with which
    suffixes, the adviser's suffix and mail domain, its four people and the two from outside (role, mail domain;
    ``None`` for the client's)."""

    companies: int
    suffixes: tuple[str, ...]
    adviser_suffix: str
    adviser_mail: str
    team: tuple[str, str, str, str]
    outsiders: tuple[tuple[str, str | None], tuple[str, str | None]]


@dataclass(frozen=True)
class Cast:
    """The companies and people of one world. ``others`` are the company names drawn beyond client and counterparty
    (a customer and comparables, contract counterparties); ``people`` are the adviser's team, then the outsiders."""

    client: str
    counterparty: str
    others: list[str]
    adviser: str
    people: list[Person]
    codename: str


def draw_cast(rng: random.Random, spec: CastSpec) -> Cast:
    """The first draws of every world, in the random stream's order (it fixes the world's bytes): the companies, the
    adviser, the people, the code name."""
    client, counterparty, *others = company_names(rng, spec.companies, list(spec.suffixes))
    adviser = company_names(rng, 1, [spec.adviser_suffix])[0]
    adviser_domain, client_domain = email_domain(adviser, spec.adviser_mail), email_domain(client, ".com")
    roles = [(role, adviser_domain) for role in spec.team]
    roles += [(role, domain or client_domain) for role, domain in spec.outsiders]
    return Cast(client, counterparty, others, adviser, make_people(rng, roles), rng.choice(CODENAMES))


InputsT = TypeVar("InputsT", IbInputs, McInputs, LawInputs)


@dataclass(frozen=True)
class Story(Generic[InputsT]):
    """What a world's files and messages quote: its cast, the day it is set around and the model inputs. A domain
    extends it with its own figures (the operating model, the survey summary, the matter budget ...)."""

    cast: Cast
    day0: date
    inputs: InputsT

    @property
    def client(self) -> str:
        return self.cast.client

    @property
    def counterparty(self) -> str:
        return self.cast.counterparty

    @property
    def adviser(self) -> str:
        return self.cast.adviser

    @property
    def people(self) -> list[Person]:
        return self.cast.people

    @property
    def project(self) -> str:
        return f"Project {self.cast.codename}"


StoryT = TypeVar("StoryT", bound=Story)
SheetWriter = Callable[[StoryT, dict[str, CellFact]], SheetSpec]


def briefing_deck(
    path: str, story: Story, title: str, findings: SlideSpec, table: SlideSpec, next_steps: list[str]
) -> DeckSpec:
    """Every domain's deck: a title slide (who prepared it for whom, and when), the findings, a table and the next
    steps."""
    opening = SlideSpec(
        f"{story.project} — {title}", [f"{story.adviser} for {story.client}", story.day0.strftime("%d %B %Y")]
    )
    return DeckSpec(path, [opening, findings, table, SlideSpec("Next steps", next_steps)])


@dataclass(frozen=True)
class DomainWorld(Generic[StoryT]):
    """A domain's world as data: how its story is drawn, the role → path of its files, and the function that writes
    each part. Calling it with ``(world_id, rng)`` builds the world's ``WorldContent`` (a ``generate.Builder``).

    ``workbooks`` maps a workbook's path to its sheets' writers, in order; they record their cells' facts as they
    write them.
    """

    draw: Callable[[random.Random], StoryT]
    files: dict[str, str]
    workbooks: dict[str, tuple[SheetWriter[StoryT], ...]]
    documents: tuple[Callable[[StoryT], DocSpec], ...]
    deck: Callable[[StoryT], DeckSpec]
    report: Callable[[StoryT], Report]
    texts: Callable[[StoryT], dict[str, TextFact]]
    mail: Callable[[StoryT], list[MailSpec]]
    chat: Callable[[StoryT], list[ChatSpec]]
    events: Callable[[StoryT], list[EventSpec]]

    def __call__(self, world_id: str, rng: random.Random) -> WorldContent:
        story = self.draw(rng)
        cells: dict[str, CellFact] = {}
        workbooks = [
            WorkbookSpec(path, [write(story, cells) for write in writers]) for path, writers in self.workbooks.items()
        ]
        return WorldContent(
            client=story.client,
            counterparty=story.counterparty,
            project=story.project,
            people=story.people,
            files=dict(self.files),
            workbooks=workbooks,
            documents=[write(story) for write in self.documents],
            decks=[self.deck(story)],
            report=self.report(story),
            mail=self.mail(story),
            chat=self.chat(story),
            events=self.events(story),
            cells=cells,
            texts=self.texts(story),
            inputs=story.inputs,
        )
