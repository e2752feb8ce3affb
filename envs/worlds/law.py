"""Corporate-law worlds: a law firm advises a buyer on a share purchase and reviews the target's contracts.

Files: a contract register (Contracts → Summary with SUM/COUNTIF/SUMIF/MAX/AVERAGE, real dates), a matter budget
(Rates → Budget, cross-sheet formulas), a share purchase agreement and an advice memo (.docx), a due-diligence report
(.pdf: two-column page + table page), a client-briefing deck (.pptx), one-value reference files, and mail, chat and
calendar around the matter. Contract values are in USD thousands, fees in USD.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta

from envs.worlds.apps import ChatSpec, EventSpec, MailSpec, at
from envs.worlds.content import base_day, clean, excel_round, money, near_tie
from envs.worlds.domain import CastSpec, DomainWorld, Story, briefing_deck, draw_cast
from envs.worlds.facts import CellFact, LawInputs, TextFact
from envs.worlds.render import DeckSpec, DocSpec, PdfSpec, SheetSpec, SlideSpec
from envs.worlds.sheets import SheetBuilder
from envs.worlds.sources import Report, reference, report, stated

REGISTER = "registers/contract_register.xlsx"
BUDGET = "models/matter_budget.xlsx"
SPA = "docs/share_purchase_agreement.docx"
MEMO = "docs/advice_memo.docx"
REPORT = "reports/due_diligence_report.pdf"
DECK = "presentations/client_briefing.pptx"
ROLES = ["Partner", "Senior Associate", "Associate", "Paralegal"]
ROLE_COLUMNS = ["B", "C", "D", "E"]
PHASES = ["Due diligence", "SPA negotiation", "Signing and closing", "Regulatory filings"]
CONTRACT_TYPES = ["Master services agreement", "Supply agreement", "Licence", "Lease", "Distribution agreement"]
STATUSES = ["Active", "Active", "Active", "Expired", "Under review"]
GOVERNING_LAWS = ["England and Wales", "New York", "Delaware", "the Netherlands", "Ireland"]
CAST = CastSpec(
    companies=14,  # client, target and the counterparties of the target's twelve material contracts
    suffixes=("plc", "Ltd", "GmbH", "B.V.", "Inc."),
    adviser_suffix="LLP",
    adviser_mail="law.com",
    team=("Partner", "Senior Associate", "Associate", "Paralegal"),
    outsiders=(("Client General Counsel", None), ("Seller's Counsel", "sellercounsel.com")),
)
Contract = tuple[str, str, str, float, date, date, str, str]
"""A contract register row: id, counterparty, type, annual value (USD k), start, end, status, change of control."""


@dataclass(frozen=True)
class RegisterSummary:
    """The Summary sheet of the register, as its formulas compute it (USD k)."""

    total_value: float
    active: int
    coc_count: int
    coc_value: float
    largest: float
    average: float


def register_summary(inputs: LawInputs) -> RegisterSummary:
    """total = SUM(values); active = COUNTIF(status, "Active"); CoC = COUNTIF/SUMIF(change of control, "Yes");
    largest = MAX(values); average = ROUND(AVERAGE(values), 1)."""
    values = [c[3] for c in inputs.contracts]
    coc = [c[3] for c in inputs.contracts if c[7] == "Yes"]
    return RegisterSummary(
        total_value=clean(sum(values)),
        active=sum(1 for c in inputs.contracts if c[6] == "Active"),
        coc_count=len(coc),
        coc_value=clean(sum(coc)),
        largest=max(values),
        average=excel_round(sum(values) / len(values), 1),
    )


@dataclass(frozen=True)
class MatterBudget:
    """Phase cost = Σ_role hours·rate (USD); total = Σ phases; with contingency = ROUND(total·(1+contingency), 0)."""

    phase_costs: list[float]
    total: float
    with_contingency: float


def matter_budget(inputs: LawInputs) -> MatterBudget:
    rates = [rate for _, rate in inputs.rates]
    costs = [sum(h * r for h, r in zip(hours, rates, strict=True)) for _, hours in inputs.phases]
    total = sum(costs)
    return MatterBudget(
        phase_costs=costs, total=total, with_contingency=excel_round(total * (1 + inputs.contingency), 0)
    )


def contract_id(number: int) -> str:
    """The register's id of the ``number``-th contract (from 1): C-01, C-02, ..."""
    return f"C-{number:02d}"


def _sample_inputs(rng: random.Random, counterparties: list[str], day0: date) -> LawInputs:
    while True:
        contracts = []
        for number, counterparty in enumerate(counterparties, start=1):
            start = day0 - timedelta(days=rng.randrange(200, 2400))
            contracts.append(
                (contract_id(number), counterparty, rng.choice(CONTRACT_TYPES), float(rng.randrange(40, 2500, 5)),
                 start, start + timedelta(days=365 * rng.randrange(2, 8)), rng.choice(STATUSES),
                 rng.choice(["Yes", "No"]))
            )  # fmt: skip
        inputs = LawInputs(
            contracts=contracts,
            rates=[(role, float(rate)) for role, rate in zip(ROLES, _rates(rng), strict=True)],
            phases=[(phase, [float(rng.randrange(4, 60)) for _ in ROLES]) for phase in PHASES],
            contingency=rng.randrange(5, 16) / 100,
        )
        values = [c[3] for c in contracts]
        budget = matter_budget(inputs)
        coc = register_summary(inputs).coc_count
        if 0 < coc < len(contracts) and not (
            near_tie(sum(values) / len(values), 1) or near_tie(budget.total * (1 + inputs.contingency), 0)
        ):
            return inputs


def _rates(rng: random.Random) -> list[int]:
    return [rng.randrange(850, 1400, 25), rng.randrange(600, 850, 25), rng.randrange(380, 600, 20),
            rng.randrange(150, 260, 10)]  # fmt: skip


@dataclass(frozen=True)
class Terms:
    """Figures drawn after the workbooks: the deal terms, the timetable, the fee cap, reference values and the due
    diligence report's colour."""

    price: float
    escrow_pct: float
    escrow_months: int
    cap_pct: int
    governing_law: str
    signing: date
    long_stop: date
    fee_cap: float
    matter_number: str
    notice_days: int
    disputes: int
    senior_managers: int


def _draw_terms(rng: random.Random, day0: date, budget: MatterBudget) -> Terms:
    # Drawn in the random stream's order (it fixes the world's bytes); the long-stop date follows the signing date.
    price = float(rng.randrange(60, 900))
    escrow_pct = rng.choice([5, 7.5, 10, 12.5])
    escrow_months = rng.choice([12, 18, 24])
    cap_pct = rng.choice([10, 20, 25, 30])
    governing_law = rng.choice(GOVERNING_LAWS)
    signing = day0 + timedelta(days=rng.randrange(10, 20))
    return Terms(
        price=price,
        escrow_pct=escrow_pct,
        escrow_months=escrow_months,
        cap_pct=cap_pct,
        governing_law=governing_law,
        signing=signing,
        long_stop=signing + timedelta(days=rng.randrange(90, 200)),
        fee_cap=float(round(budget.with_contingency * rng.uniform(1.05, 1.3), -3)),
        matter_number=f"{rng.randrange(10000, 99999)}-{rng.randrange(100, 999)}",
        notice_days=rng.choice([30, 45, 60, 90, 120]),
        disputes=rng.randrange(2, 6),
        senior_managers=rng.randrange(5, 15),
    )


@dataclass(frozen=True)
class Matter(Story[LawInputs]):
    """The matter's story: the law firm (the adviser) acts for the client on buying the target (the counterparty)."""

    summary: RegisterSummary
    budget: MatterBudget
    terms: Terms

    @property
    def msa_party(self) -> str:
        """The counterparty whose agreement the report's notice clause is about (the first with a change-of-control
        clause)."""
        return next((c for c in self.inputs.contracts if c[7] == "Yes"), self.inputs.contracts[0])[1]

    @property
    def largest_contracts(self) -> list[Contract]:
        return sorted(self.inputs.contracts, key=lambda c: c[3], reverse=True)[:5]


def _draw_matter(rng: random.Random) -> Matter:
    cast = draw_cast(rng, CAST)
    day0 = base_day(rng)
    inputs = _sample_inputs(rng, cast.others, day0)
    budget = matter_budget(inputs)
    return Matter(
        cast=cast, day0=day0, inputs=inputs, summary=register_summary(inputs), budget=budget,
        terms=_draw_terms(rng, day0, budget),
    )  # fmt: skip


# --- the contract register and the matter budget ---------------------------------------------------------------------


def _contracts_sheet(matter: Matter, cells: dict[str, CellFact]) -> SheetSpec:
    contracts = SheetBuilder(REGISTER, "Contracts", cells)
    contracts.row(1, ["ID", "Counterparty", "Type", "Annual value (USD k)", "Start date", "End date", "Status",
                      "Change of control"], bold=True)  # fmt: skip
    for offset, (cid, party, kind, value, start, end, status, coc) in enumerate(matter.inputs.contracts):
        row = offset + 2
        contracts.row(row, [cid, party, kind])
        contracts.put(f"D{row}", value, fact=f"value_{cid}", label=f"annual value of {cid}", unit="USD k")
        contracts.put(f"E{row}", start, fact=f"start_{cid}", label=f"start date of {cid}", number_format="yyyy-mm-dd")
        contracts.put(f"F{row}", end, fact=f"end_{cid}", label=f"end date of {cid}", number_format="yyyy-mm-dd")
        contracts.put(f"G{row}", status, fact=f"status_{cid}", label=f"status of {cid}")
        contracts.put(f"H{row}", coc, fact=f"coc_{cid}", label=f"change-of-control clause in {cid}")
    return contracts.spec({"B": 26, "C": 28})


def _register_summary_sheet(matter: Matter, cells: dict[str, CellFact]) -> SheetSpec:
    summary, last = matter.summary, len(matter.inputs.contracts) + 1
    register = SheetBuilder(REGISTER, "Summary", cells, title=f"{matter.project} — contract register summary")
    register.formulas([
        (3, "total_value", "Total annual value (USD k)", f"=SUM(Contracts!D2:D{last})", summary.total_value),
        (4, "active_count", "Active contracts", f'=COUNTIF(Contracts!G2:G{last},"Active")', summary.active),
        (5, "coc_count", "Contracts with change-of-control clauses", f'=COUNTIF(Contracts!H2:H{last},"Yes")',
         summary.coc_count),
        (6, "coc_value", "Annual value with change-of-control clauses (USD k)",
         f'=SUMIF(Contracts!H2:H{last},"Yes",Contracts!D2:D{last})', summary.coc_value),
        (7, "largest_value", "Largest annual value (USD k)", f"=MAX(Contracts!D2:D{last})", summary.largest),
        (8, "average_value", "Average annual value (USD k)", f"=ROUND(AVERAGE(Contracts!D2:D{last}),1)",
         summary.average),
    ])  # fmt: skip
    return register.spec({"A": 48})


def _rates_sheet(matter: Matter, cells: dict[str, CellFact]) -> SheetSpec:
    rates = SheetBuilder(BUDGET, "Rates", cells)
    rates.row(1, ["Role", "Hourly rate (USD)"], bold=True)
    for offset, (role, rate) in enumerate(matter.inputs.rates):
        rates.put(f"A{offset + 2}", role)
        rates.put(f"B{offset + 2}", rate, fact=f"rate_{role}", label=f"hourly rate of a {role}", unit="USD")
    return rates.spec({"A": 20})


def _budget_sheet(matter: Matter, cells: dict[str, CellFact]) -> SheetSpec:
    inputs, budget = matter.inputs, matter.budget
    sheet = SheetBuilder(BUDGET, "Budget", cells)
    sheet.row(1, ["Phase (hours)", *ROLES, "Cost (USD)"], bold=True)
    for offset, ((phase, hours), cost) in enumerate(zip(inputs.phases, budget.phase_costs, strict=True)):
        row = offset + 2
        sheet.put(f"A{row}", phase)
        for column, role, value in zip(ROLE_COLUMNS, ROLES, hours, strict=True):
            sheet.put(f"{column}{row}", value, fact=f"hours_{phase}_{role}", label=f"{role} hours on {phase}")
        formula = "=" + "+".join(f"{c}{row}*Rates!$B${i + 2}" for i, c in enumerate(ROLE_COLUMNS))
        sheet.put(f"F{row}", formula, fact=f"cost_{phase}", label=f"cost of {phase}", computed=cost, unit="USD")
    total_row = len(PHASES) + 2
    sheet.put(f"A{total_row}", "Total", bold=True)
    sheet.put(f"F{total_row}", f"=SUM(F2:F{total_row - 1})", fact="budget_total", label="total budget",
              computed=budget.total, unit="USD")  # fmt: skip
    sheet.put(f"A{total_row + 2}", "Contingency")
    sheet.put(f"B{total_row + 2}", inputs.contingency, fact="contingency", label="contingency")
    sheet.put(f"A{total_row + 3}", "Total with contingency", bold=True)
    sheet.put(f"F{total_row + 3}", f"=ROUND(F{total_row}*(1+B{total_row + 2}),0)", fact="budget_with_contingency",
              label="total budget with contingency", computed=budget.with_contingency, unit="USD")  # fmt: skip
    return sheet.spec({"A": 24})


# --- documents, the due diligence report and the client deck ---------------------------------------------------------


def _share_purchase_agreement(matter: Matter) -> DocSpec:
    terms, target = matter.terms, matter.counterparty
    return DocSpec(
        SPA,
        f"Share purchase agreement — {target}",
        [
            f"This agreement is made between {matter.client} (the Buyer) and the shareholders of {target} (the "
            "Sellers).",
            f"1. Purchase price. The purchase price for the shares is USD {terms.price}m, payable in cash at "
            "completion.",
            f"2. Escrow. {terms.escrow_pct}% of the purchase price is paid into escrow for {terms.escrow_months} "
            "months.",
            f"3. Limitation. The Sellers' aggregate liability under the warranties is capped at {terms.cap_pct}% of "
            "the purchase price.",
            f"4. Long-stop date. If completion has not occurred by {terms.long_stop.isoformat()}, either party may "
            "terminate.",
            f"5. Governing law. This agreement is governed by the law of {terms.governing_law}.",
        ],
    )


def _memo(matter: Matter) -> DocSpec:
    partner, counsel = matter.people[0], matter.people[4]
    summary, contracts = matter.summary, matter.inputs.contracts
    return DocSpec(
        MEMO,
        f"Advice memo — {matter.project}",
        [
            f"To: {counsel.name}, General Counsel, {matter.client}. From: {partner.name}, {matter.adviser}. Date: "
            f"{matter.day0.isoformat()}.",
            f"We reviewed {len(contracts)} material contracts of {matter.counterparty} with a total annual value of "
            f"USD {summary.total_value}k.",
            f"{summary.coc_count} contracts contain change-of-control clauses, with an annual value of "
            f"USD {summary.coc_value}k; counterparty consent should be a condition to completion.",
            [["ID", "Counterparty", "Annual value (USD k)"],
             *[[c[0], c[1], str(c[3])] for c in matter.largest_contracts]],
            "We recommend a specific indemnity for the pending regulatory review.",
        ],
    )  # fmt: skip


def _due_diligence_report(matter: Matter) -> Report:
    target, terms, msa_party = matter.counterparty, matter.terms, matter.msa_party
    wrapped = (
        f"The agreement with {msa_party} may be terminated by the counterparty on {terms.notice_days} days' written "
        f"notice following a change of control of {target}."
    )
    spec = PdfSpec(
        REPORT,
        f"Legal due diligence report — {target}",
        [
            f"Prepared by {matter.adviser} for {matter.client} in connection with {matter.project}.",
            f"The review covered {len(matter.inputs.contracts)} material contracts disclosed in the data room.",
        ],
        "Material contracts",
        [
            f"Several contracts restrict assignment or a change of control. {wrapped} No consent has been requested "
            "so far.",
            "Most supply agreements renew automatically for one-year periods unless notice is given three months "
            "before expiry.",
            "Two licences are limited to named territories and would not extend to the Buyer's group.",
        ],
        [
            f"The target is party to {terms.disputes} pending disputes, none of which is expected to exceed "
            "the warranty de minimis threshold.",
            f"Employment contracts for the {terms.senior_managers} senior managers contain six-month non-compete "
            "covenants and retention arrangements tied to completion.",
            "Real estate is held on leases; no freehold property was identified.",
        ],
        "Largest contracts by annual value",
        [["ID", "Counterparty", "Annual value (USD k)", "End date"],
         *[[c[0], c[1], money(c[3]), c[5].isoformat()] for c in matter.largest_contracts]],
    )  # fmt: skip
    label = f"notice period (days) in the agreement with {msa_party}"
    return report(spec, wrapped, str(terms.notice_days), label)


def _client_deck(matter: Matter) -> DeckSpec:
    summary, terms, budget = matter.summary, matter.terms, matter.budget
    key_findings = [
        f"{summary.coc_count} change-of-control contracts (USD {summary.coc_value}k a year)",
        f"Purchase price USD {terms.price}m with {terms.escrow_pct}% in escrow",
        f"Signing planned for {terms.signing.isoformat()}",
    ]
    costs = [[p, money(c, 0)] for (p, _), c in zip(matter.inputs.phases, budget.phase_costs, strict=True)]
    return briefing_deck(
        DECK, matter, "client briefing", SlideSpec("Key findings", key_findings),
        SlideSpec("Matter budget", table=[["Phase", "Cost (USD)"], *costs]),
        ["Seek counterparty consents", "Finalise disclosure letter"],
    )  # fmt: skip


# --- facts stated outside the workbooks: reference files, documents and mail -----------------------------------------


def _texts(matter: Matter) -> dict[str, TextFact]:
    terms, summary = matter.terms, matter.summary
    return {
        "matter_number": reference("matter number", "matter_number", terms.matter_number),
        "governing_law": reference("governing law", "governing_law", terms.governing_law),
        "client_name": reference("client", "client_name", matter.client),
        "signing_date": reference("signing date", "signing_date", terms.signing),
        "price": stated("purchase price (USD m)", SPA, terms.price),
        "escrow_pct": stated("escrow (% of price)", SPA, terms.escrow_pct),
        "escrow_months": stated("escrow period (months)", SPA, terms.escrow_months),
        "cap_pct": stated("warranty cap (% of price)", SPA, terms.cap_pct),
        "long_stop": stated("long-stop date", SPA, terms.long_stop),
        "memo_total_value": stated("total annual value in the memo", MEMO, summary.total_value),
        "memo_coc_value": stated("change-of-control value in the memo", MEMO, summary.coc_value),
        "fee_cap": stated("agreed fee cap (USD)", "mail:fee_cap", terms.fee_cap),
        "msa_party": stated("counterparty with the notice clause", REPORT, matter.msa_party),
    }


def _mail(matter: Matter) -> list[MailSpec]:
    partner, senior, associate, paralegal, counsel, seller_counsel = matter.people
    project, target, day0 = matter.project, matter.counterparty, matter.day0
    return [
        MailSpec("instruction", "t01", "inbox", counsel.email, [partner.email], at(day0 - timedelta(days=12), 9, 0),
                 f"{project}: instruction",
                 f"We would like you to act for {matter.client} on the acquisition of {target}."),
        MailSpec("instruction_reply", "t01", "sent", partner.email, [counsel.email],
                 at(day0 - timedelta(days=12), 11, 20), f"RE: {project}: instruction",
                 f"Thank you. Our matter number is {matter.terms.matter_number}; the budget follows.",
                 attachments=[BUDGET]),
        MailSpec("fee_cap", "t01", "inbox", counsel.email, [partner.email], at(day0 - timedelta(days=11), 8, 45),
                 f"RE: RE: {project}: instruction",
                 f"Budget noted. Our board has approved a fee cap of USD {matter.terms.fee_cap:,.0f} for this matter."),
        MailSpec("register", "t02", "inbox", paralegal.email, [senior.email, associate.email],
                 at(day0 - timedelta(days=6), 17, 30), "Contract register updated",
                 "The register now covers every contract in the data room.", attachments=[REGISTER]),
        MailSpec("spa", "t03", "inbox", seller_counsel.email, [partner.email, senior.email],
                 at(day0 - timedelta(days=3), 19, 5), f"{target}: SPA draft", "Our draft SPA is attached.",
                 attachments=[SPA]),
        MailSpec("report", "t04", "inbox", senior.email, [partner.email], at(day0 - timedelta(days=1), 21, 10),
                 "DD report final", "Final due diligence report attached.", attachments=[REPORT]),
    ]  # fmt: skip


def _chat(matter: Matter) -> list[ChatSpec]:
    partner, senior, associate, paralegal, _, _ = matter.people
    day0 = matter.day0
    return [
        ChatSpec("register_path", "matter-team", paralegal.name, at(day0, 9, 0), f"Register is at {REGISTER}"),
        ChatSpec("consents", "matter-team", partner.name, at(day0, 9, 40),
                 "Please prioritise the change-of-control consents before signing."),
        ChatSpec("budget", "matter-team", senior.name, at(day0, 10, 30), f"Budget model: {BUDGET}"),
        ChatSpec("printer", "office", associate.name, at(day0, 13, 15), "The 4th floor printer is fixed."),
    ]  # fmt: skip


def _events(matter: Matter) -> list[EventSpec]:
    partner, senior, associate, _, counsel, seller_counsel = matter.people
    day0, signing, firm = matter.day0, matter.terms.signing, matter.adviser
    team = [partner.email, senior.email, associate.email]
    return [
        EventSpec("dd_call", "Due diligence call", at(day0 + timedelta(days=1), 11), at(day0 + timedelta(days=1), 12),
                  [*team, counsel.email], "Video call", "Walk through the red-flag issues."),
        EventSpec("negotiation", "SPA negotiation meeting", at(day0 + timedelta(days=4), 10),
                  at(day0 + timedelta(days=4), 16), [*team, seller_counsel.email], f"{firm} offices", "Full day."),
        EventSpec("board", f"{matter.client} board call", at(day0 + timedelta(days=6), 17),
                  at(day0 + timedelta(days=6), 18), [partner.email, counsel.email], "Video call", "Approval to sign."),
        EventSpec("signing", "Signing", at(signing, 15), at(signing, 16), [*team, counsel.email, seller_counsel.email],
                  f"{firm} offices", f"Signing of the SPA for {matter.counterparty}."),
    ]  # fmt: skip


build = DomainWorld(
    draw=_draw_matter,
    files={"register": REGISTER, "budget": BUDGET, "spa": SPA, "memo": MEMO, "report": REPORT, "deck": DECK},
    workbooks={REGISTER: (_contracts_sheet, _register_summary_sheet), BUDGET: (_rates_sheet, _budget_sheet)},
    documents=(_share_purchase_agreement, _memo),
    deck=_client_deck,
    report=_due_diligence_report,
    texts=_texts,
    mail=_mail,
    chat=_chat,
    events=_events,
)
