"""Investment-banking worlds: a sell-side process where the bank advises an acquirer on a target.

Files: an operating model (Assumptions → Model → Valuation, cross-sheet formulas), a comps workbook (EV/EBITDA per
comparable, MEDIAN/AVERAGE/MAX/MIN), an investment-committee memo and an engagement letter (.docx), a target
overview (.pdf: two-column page + table page), a board-update deck (.pptx), one-value reference files, and mail,
chat and calendar around the deal. Money is in USD millions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta

from envs.worlds.apps import ChatSpec, EventSpec, MailSpec, at
from envs.worlds.content import base_day, clean, excel_round, money, near_tie
from envs.worlds.domain import CastSpec, DomainWorld, Story, briefing_deck, draw_cast
from envs.worlds.facts import CellFact, IbInputs, TextFact
from envs.worlds.render import DeckSpec, DocSpec, PdfSpec, SheetSpec, SlideSpec
from envs.worlds.sheets import SheetBuilder
from envs.worlds.sources import Report, reference, report, stated

MODEL = "models/operating_model.xlsx"
COMPS = "models/comps.xlsx"
MEMO = "docs/ic_memo.docx"
LETTER = "docs/engagement_letter.docx"
REPORT = "reports/target_overview.pdf"
DECK = "presentations/board_update.pptx"
YEARS = ["FY2025A", "FY2026E", "FY2027E", "FY2028E", "FY2029E"]
YEAR_COLUMNS = ["B", "C", "D", "E", "F"]
CITIES = ["Rotterdam", "Leipzig", "Gdansk", "Lyon", "Porto", "Tampere", "Brno", "Bilbao", "Aarhus", "Turin"]
SECTORS = ["specialty packaging", "industrial automation", "cold-chain logistics", "water treatment", "medical devices"]
CAST = CastSpec(
    companies=9,  # client, target, the target's largest customer and six comparables
    suffixes=("Holdings", "Group", "Industries", "Partners"),
    adviser_suffix="Capital",
    adviser_mail="capital.com",
    team=("Managing Director", "Vice President", "Associate", "Analyst"),
    outsiders=(("Client CFO", None), ("Sell-side Banker", "sellside-advisors.com")),
)


@dataclass(frozen=True)
class OperatingModel:
    """The Model sheet's rows per year, as the formulas compute them (USD m; margin a fraction)."""

    revenue: list[float]
    cogs: list[float]
    gross_profit: list[float]
    opex: list[float]
    ebitda: list[float]
    margin: list[float]
    taxes: list[float]
    cash_flow: list[float]


def operating_model(inputs: IbInputs) -> OperatingModel:
    """Revenue_t = ROUND(Revenue_{t-1}·(1+g_t), 1); COGS_t = ROUND(Rev_t·cogs%_t, 1); Opex = ROUND(Rev·opex%, 1);
    EBITDA = (Rev − COGS) − Opex; margin = EBITDA/Rev; taxes = ROUND(EBITDA·tax, 1); cash flow = EBITDA − taxes."""
    revenue = [inputs.base_revenue]
    for growth in inputs.growth:
        revenue.append(excel_round(revenue[-1] * (1 + growth), 1))
    cogs = [excel_round(r * pct, 1) for r, pct in zip(revenue, inputs.cogs_pct, strict=True)]
    opex = [excel_round(r * inputs.opex_pct, 1) for r in revenue]
    gross = [r - c for r, c in zip(revenue, cogs, strict=True)]
    ebitda = [g - o for g, o in zip(gross, opex, strict=True)]
    taxes = [excel_round(e * inputs.tax_rate, 1) for e in ebitda]
    return OperatingModel(
        revenue=revenue,
        cogs=cogs,
        gross_profit=[clean(g) for g in gross],
        opex=opex,
        ebitda=[clean(e) for e in ebitda],
        margin=[clean(e / r) for e, r in zip(ebitda, revenue, strict=True)],
        taxes=taxes,
        cash_flow=[clean(e - t) for e, t in zip(ebitda, taxes, strict=True)],
    )


def comps_multiples(inputs: IbInputs) -> list[float]:
    """EV/EBITDA per comparable: ROUND(EV/EBITDA, 1)."""
    return [excel_round(ev / ebitda, 1) for _, ev, ebitda in inputs.comps]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def enterprise_value(inputs: IbInputs, model: OperatingModel) -> float:
    """Valuation!B5 = ROUND(FY2026E EBITDA × multiple, 1)."""
    return excel_round(model.ebitda[1] * inputs.multiple, 1)


def _sample_inputs(rng: random.Random, comp_names: list[str]) -> IbInputs:
    """Draw inputs until no ROUND in the model sits on a tie (so every evaluator agrees on every cell)."""
    while True:
        comps = []
        for name in comp_names:
            ebitda = round(rng.uniform(40, 400), 1)
            comps.append((name, float(round(ebitda * rng.uniform(6.0, 14.0))), ebitda))
        inputs = IbInputs(
            years=YEARS,
            base_revenue=round(rng.uniform(180, 900), 1),
            growth=[rng.randrange(3, 16) / 100 for _ in YEARS[1:]],
            cogs_pct=_cogs_path(rng),
            opex_pct=rng.randrange(10, 19) / 100,
            tax_rate=rng.randrange(21, 31) / 100,
            comps=comps,
            multiple=0.0,
            net_debt=round(rng.uniform(30, 250), 1),
        )
        multiple = excel_round(median(comps_multiples(inputs)), 1)
        inputs = inputs.model_copy(update={"multiple": multiple})
        if not _has_tie(inputs):
            return inputs


def _cogs_path(rng: random.Random) -> list[float]:
    """COGS % of revenue per year: a starting level that drifts by −2..+1 points a year (scale benefits)."""
    path = [rng.randrange(52, 69)]
    for _ in YEARS[1:]:
        path.append(path[-1] + rng.randrange(-2, 2))
    return [points / 100 for points in path]


def _has_tie(inputs: IbInputs) -> bool:
    revenue = [inputs.base_revenue]
    products = []
    for growth in inputs.growth:
        products.append(revenue[-1] * (1 + growth))
        revenue.append(excel_round(products[-1], 1))
    model = operating_model(inputs)
    products += [r * pct for r, pct in zip(revenue, inputs.cogs_pct, strict=True)]
    products += [r * inputs.opex_pct for r in revenue]
    products += [e * inputs.tax_rate for e in model.ebitda]
    products += [model.ebitda[1] * inputs.multiple] + [ev / e for _, ev, e in inputs.comps]
    return any(near_tie(p, 1) for p in products)


@dataclass(frozen=True)
class Terms:
    """Figures drawn after the model: the letter's fees, market data, the bid timetable and the overview's colour."""

    fee_pct: float
    min_fee: float
    retainer: int
    share_price: float
    shares: float
    fx: float
    premium: int
    largest_share: int
    data_room_code: str
    bid_deadline: date
    sites: int
    next_four_share: int
    erp_year: int
    utilisation: int
    headcount: int


def _draw_terms(rng: random.Random, codename: str, day0: date) -> Terms:
    # Keyword arguments are evaluated in order: this order is the random stream's, so it fixes the world's bytes.
    return Terms(
        fee_pct=rng.choice([0.9, 1.0, 1.1, 1.25, 1.4]),
        min_fee=float(rng.randrange(3, 9)),
        retainer=rng.randrange(50, 151, 25),
        share_price=round(rng.uniform(8, 60), 2),
        shares=round(rng.uniform(20, 120), 1),
        fx=round(rng.uniform(1.03, 1.15), 4),
        premium=rng.randrange(20, 41),
        largest_share=rng.randrange(14, 32),
        data_room_code=f"{codename[:3].upper()}-{rng.randrange(1000, 9999)}",
        bid_deadline=day0 + timedelta(days=rng.randrange(25, 40)),
        sites=rng.randrange(4, 12),
        next_four_share=rng.randrange(18, 30),
        erp_year=2019 + rng.randrange(0, 5),
        utilisation=rng.randrange(70, 95),
        headcount=rng.randrange(600, 2400),
    )


@dataclass(frozen=True)
class Deal(Story[IbInputs]):
    """The deal's story: the bank (the adviser) advises the client on buying the target (the counterparty)."""

    city: str
    sector: str
    model: OperatingModel
    multiples: list[float]
    terms: Terms

    @property
    def customer(self) -> str:
        return self.cast.others[0]

    @property
    def ev(self) -> float:
        return enterprise_value(self.inputs, self.model)

    @property
    def equity(self) -> float:
        return clean(self.ev - self.inputs.net_debt)

    @property
    def comp_median(self) -> float:
        return clean(median(self.multiples))


def _draw_deal(rng: random.Random) -> Deal:
    cast = draw_cast(rng, CAST)
    city, sector = rng.choice(CITIES), rng.choice(SECTORS)
    day0 = base_day(rng)
    inputs = _sample_inputs(rng, cast.others[1:])
    return Deal(
        cast=cast, day0=day0, inputs=inputs, city=city, sector=sector, model=operating_model(inputs),
        multiples=comps_multiples(inputs), terms=_draw_terms(rng, cast.codename, day0),
    )  # fmt: skip


# --- the operating model and the comps workbook ----------------------------------------------------------------------


def _assumptions_sheet(deal: Deal, cells: dict[str, CellFact]) -> SheetSpec:
    inputs = deal.inputs
    assumptions = SheetBuilder(MODEL, "Assumptions", cells, title=f"{deal.project} — model assumptions")
    assumptions.row(2, ["", *YEARS], bold=True)
    assumptions.put("A3", "Base revenue FY2025A (USD m)")
    assumptions.put("B3", inputs.base_revenue, fact="base_revenue", label="base revenue FY2025A", unit="USD m")
    assumptions.put("A4", "Revenue growth")
    for column, year, growth in zip(YEAR_COLUMNS[1:], YEARS[1:], inputs.growth, strict=True):
        assumptions.put(f"{column}4", growth, fact=f"growth_{year}", label=f"revenue growth {year}", unit="fraction")
    assumptions.put("A5", "COGS (% of revenue)")
    for column, year, pct in zip(YEAR_COLUMNS, YEARS, inputs.cogs_pct, strict=True):
        assumptions.put(f"{column}5", pct, fact=f"cogs_pct_{year}", label=f"COGS % of revenue {year}", unit="fraction")
    assumptions.inputs(
        [
            (6, "opex_pct", "Opex (% of revenue)", inputs.opex_pct),
            (7, "tax_rate", "Cash tax rate", inputs.tax_rate),
            (8, "assumed_multiple", "EV/EBITDA multiple (comps median, rounded)", inputs.multiple),
            (9, "net_debt", "Net debt at close (USD m)", inputs.net_debt),
        ]
    )
    return assumptions.spec({"A": 44})


def _model_sheet(deal: Deal, cells: dict[str, CellFact]) -> SheetSpec:
    model = deal.model
    sheet = SheetBuilder(MODEL, "Model", cells, title=f"{deal.project} — operating model (USD m)")
    sheet.row(3, ["USD m", *YEARS], bold=True)
    lines = [
        (4, "revenue", "Revenue", model.revenue),
        (6, "cogs", "COGS", model.cogs),
        (7, "gross_profit", "Gross profit", model.gross_profit),
        (8, "opex", "Operating expenses", model.opex),
        (9, "ebitda", "EBITDA", model.ebitda),
        (10, "margin", "EBITDA margin", model.margin),
        (11, "taxes", "Cash taxes", model.taxes),
        (12, "cash_flow", "After-tax cash flow (EBITDA − taxes)", model.cash_flow),
    ]
    sheet.put("A5", "Revenue growth")
    for row, _, label, _ in lines:
        sheet.put(f"A{row}", label)
    for index, (column, year) in enumerate(zip(YEAR_COLUMNS, YEARS, strict=True)):
        previous = YEAR_COLUMNS[index - 1]
        formulas = {
            4: f"=ROUND({previous}4*(1+Assumptions!{column}4),1)" if index else "=Assumptions!B3",
            6: f"=ROUND({column}4*Assumptions!{column}5,1)",
            7: f"={column}4-{column}6",
            8: f"=ROUND({column}4*Assumptions!$B$6,1)",
            9: f"={column}7-{column}8",
            10: f"={column}9/{column}4",
            11: f"=ROUND({column}9*Assumptions!$B$7,1)",
            12: f"={column}9-{column}11",
        }
        for row, key, label, values in lines:
            unit = "fraction" if key == "margin" else "USD m"
            sheet.put(
                f"{column}{row}", formulas[row], fact=f"{key}_{year}", label=f"{label} {year}", computed=values[index],
                unit=unit, number_format="0.0%" if key == "margin" else "#,##0.0",
            )  # fmt: skip
        if index:
            sheet.put(f"{column}5", f"={column}4/{previous}4-1", number_format="0.0%")
    cumulative = clean(sum(model.ebitda[1:]))
    sheet.put("A14", "Cumulative EBITDA FY2026E–FY2029E", bold=True)
    sheet.put("B14", "=SUM(C9:F9)", fact="cumulative_ebitda", label="cumulative EBITDA FY2026E–FY2029E",
              computed=cumulative, unit="USD m")  # fmt: skip
    return sheet.spec({"A": 36})


def _valuation_sheet(deal: Deal, cells: dict[str, CellFact]) -> SheetSpec:
    inputs = deal.inputs
    valuation = SheetBuilder(MODEL, "Valuation", cells, title=f"{deal.project} — valuation (USD m)")
    valuation.formulas(
        [
            (3, "valuation_ebitda", "FY2026E EBITDA", "=Model!C9", deal.model.ebitda[1]),
            (4, "valuation_multiple", "EV/EBITDA multiple", "=Assumptions!B8", inputs.multiple),
            (5, "enterprise_value", "Enterprise value", "=ROUND(B3*B4,1)", deal.ev),
            (6, "valuation_net_debt", "Net debt", "=Assumptions!B9", inputs.net_debt),
            (7, "equity_value", "Equity value", "=B5-B6", deal.equity),
        ]
    )
    return valuation.spec({"A": 28})


def _comps_sheet(deal: Deal, cells: dict[str, CellFact]) -> SheetSpec:
    multiples = deal.multiples
    comps = SheetBuilder(COMPS, "Comps", cells)
    comps.row(1, ["Company", "Ticker", "EV (USD m)", "EBITDA (USD m)", "EV/EBITDA (x)"], bold=True)
    for offset, ((name, comp_ev, comp_ebitda), multiple) in enumerate(zip(deal.inputs.comps, multiples, strict=True)):
        row = offset + 2
        ticker = name.split()[0][:4].upper()
        comps.row(row, [name, ticker, comp_ev, comp_ebitda])
        comps.put(f"E{row}", f"=ROUND(C{row}/D{row},1)", fact=f"multiple_{ticker}", label=f"EV/EBITDA of {name}",
                  computed=multiple, unit="x")  # fmt: skip
    for row, key, label, formula, value in [
        (9, "comps_median", "Median", "=MEDIAN(E2:E7)", deal.comp_median),
        (10, "comps_mean", "Mean", "=AVERAGE(E2:E7)", clean(sum(multiples) / len(multiples))),
        (11, "comps_high", "High", "=MAX(E2:E7)", max(multiples)),
        (12, "comps_low", "Low", "=MIN(E2:E7)", min(multiples)),
    ]:
        comps.put(f"A{row}", label, bold=True)
        comps.put(f"E{row}", formula, fact=key, label=f"{label} EV/EBITDA of the comparables", computed=value, unit="x")
    return comps.spec({"A": 26})


# --- documents, the target overview and the board deck ---------------------------------------------------------------


def _memo(deal: Deal) -> DocSpec:
    md = deal.people[0]
    model, inputs, median_multiple = deal.model, deal.inputs, deal.comp_median
    return DocSpec(
        MEMO,
        f"Investment committee memo — {deal.project}",
        [
            f"To: Investment Committee. From: {md.name}, {deal.adviser}. Date: {deal.day0.isoformat()}.",
            f"We recommend that {deal.client} submit a second-round bid for {deal.counterparty}, a {deal.sector} "
            f"business headquartered in {deal.city}.",
            f"Management's case shows FY2026E revenue of USD {model.revenue[1]}m and EBITDA of USD {model.ebitda[1]}m, "
            f"an EBITDA margin of {model.margin[1] * 100:.1f}%.",
            f"Trading comparables imply a median EV/EBITDA multiple of {median_multiple}x. Applying {inputs.multiple}x "
            f"to FY2026E EBITDA gives an enterprise value of USD {deal.ev}m and, after net debt of USD "
            f"{inputs.net_debt}m, an equity value of USD {deal.equity}m.",
            [["USD m", *YEARS], ["Revenue", *map(str, model.revenue)], ["EBITDA", *map(str, model.ebitda)]],
            "Key risks: customer concentration, raw-material pricing and integration of the ERP system.",
        ],
    )


def _letter(deal: Deal) -> DocSpec:
    terms, bank = deal.terms, deal.adviser
    return DocSpec(
        LETTER,
        f"Engagement letter — {bank} and {deal.client}",
        [
            f"{deal.client} (the Company) engages {bank} as exclusive financial adviser on {deal.project}, the "
            f"proposed acquisition of {deal.counterparty}.",
            f"Fees. A success fee equal to {terms.fee_pct}% of the enterprise value of the transaction, subject to a "
            f"minimum fee of USD {terms.min_fee}m, payable on completion.",
            f"Retainer. A monthly retainer of USD {terms.retainer}k, credited against the success fee.",
            "Term. Twelve months from the date of this letter, terminable by either party on 30 days' notice.",
        ],
    )


def _target_overview(deal: Deal) -> Report:
    target, city, terms, model = deal.counterparty, deal.city, deal.terms, deal.model
    wrapped = (
        f"The largest customer of {target}, {deal.customer}, accounted for {terms.largest_share} percent of FY2025 "
        f"revenue under a supply agreement that runs until December 2028."
    )
    spec = PdfSpec(
        REPORT,
        f"{target} — target overview ({deal.project})",
        [
            f"This overview was prepared by {deal.adviser} for {deal.client} from the management presentation and "
            "data room.",
            f"{target} is a {deal.sector} business headquartered in {city} with {terms.sites} production sites.",
        ],
        "Business overview",
        [
            f"{target} sells to industrial and retail customers across Europe. {wrapped} The next four customers "
            f"together represent a further {terms.next_four_share} percent of revenue.",
            "Pricing is set annually with pass-through clauses for energy and resin costs, which protected gross "
            "margin during the 2022 cost spike and supports the management case.",
            "The order book at year end covered roughly seven months of budgeted revenue.",
        ],
        [
            f"Operations run on a shared ERP platform installed in {terms.erp_year}, and the plant in "
            f"{city} operates three shifts at {terms.utilisation} percent utilisation.",
            f"Headcount was {terms.headcount} at the end of FY2025, of whom about a fifth work in "
            "engineering, maintenance and quality roles across the network.",
            "Capital expenditure is expected to normalise at around four percent of revenue after the current "
            "expansion programme completes.",
        ],
        "Historical and projected financials",
        [
            ["USD m", *YEARS],
            ["Revenue", *(money(v) for v in model.revenue)],
            ["EBITDA", *(money(v) for v in model.ebitda)],
            ["EBITDA margin (%)", *(f"{m * 100:.1f}" for m in model.margin)],
        ],
    )
    return report(spec, wrapped, str(terms.largest_share), "percent of FY2025 revenue from the largest customer")


def _board_deck(deal: Deal) -> DeckSpec:
    ebitda26, inputs = deal.model.ebitda[1], deal.inputs
    key_messages = [
        f"{deal.counterparty}: FY2026E revenue USD {deal.model.revenue[1]}m, EBITDA USD {ebitda26}m",
        f"Comparable companies trade at a median {deal.comp_median}x EV/EBITDA",
        f"Second-round bids are due on {deal.terms.bid_deadline.isoformat()}",
    ]
    valuation = [
        ["Metric", "Value"],
        ["FY2026E EBITDA (USD m)", str(ebitda26)],
        ["EV/EBITDA multiple (x)", str(inputs.multiple)],
        ["Enterprise value (USD m)", str(deal.ev)],
        ["Net debt (USD m)", str(inputs.net_debt)],
        ["Equity value (USD m)", str(deal.equity)],
    ]
    return briefing_deck(
        DECK, deal, "board update", SlideSpec("Key messages", key_messages),
        SlideSpec("Valuation summary", table=valuation),
        ["Confirm financing structure", "Complete confirmatory due diligence"],
    )  # fmt: skip


# --- facts stated outside the workbooks: reference files, documents, mail and chat ----------------------------------


def _texts(deal: Deal) -> dict[str, TextFact]:
    terms, model = deal.terms, deal.model
    return {
        "deal_codename": reference("deal code name", "deal_codename", deal.project),
        "share_price": reference("target share price (USD)", "target_share_price_usd", terms.share_price),
        "diluted_shares": reference("target diluted shares (millions)", "target_diluted_shares_m", terms.shares),
        "fx_eur_usd": reference("EUR/USD rate (USD per EUR)", "fx_eur_usd", terms.fx),
        "bid_deadline": reference("second-round bid deadline", "bid_deadline", terms.bid_deadline),
        "fee_pct": stated("success fee (% of EV)", LETTER, terms.fee_pct),
        "min_fee": stated("minimum success fee (USD m)", LETTER, terms.min_fee),
        "retainer": stated("monthly retainer (USD k)", LETTER, terms.retainer),
        "memo_revenue": stated("FY2026E revenue in the memo", MEMO, model.revenue[1]),
        "memo_ebitda": stated("FY2026E EBITDA in the memo", MEMO, model.ebitda[1]),
        "memo_ev": stated("enterprise value in the memo", MEMO, deal.ev),
        "mail_net_debt": stated("net debt at close (USD m)", "mail:net_debt", deal.inputs.net_debt),
        "control_premium": stated("control premium (%)", "chat:premium", terms.premium),
        "data_room_code": stated("data room access code", "chat:data_room", terms.data_room_code),
        "customer": stated("largest customer", REPORT, deal.customer),
        "target": stated("target company", MEMO, deal.counterparty),
    }


def _mail(deal: Deal) -> list[MailSpec]:
    md, vp, associate, _, cfo, seller = deal.people
    project, target, day0, deadline = deal.project, deal.counterparty, deal.day0, deal.terms.bid_deadline
    return [
        MailSpec("model", "t01", "inbox", cfo.email, [md.email], at(day0 - timedelta(days=6), 9, 12),
                 f"{project}: updated management case",
                 f"Hi {md.name.split()[0]},\n\nAttached is the updated operating model with the management case.\n\n"
                 f"Best,\n{cfo.name}", cc=[vp.email], attachments=[MODEL]),
        MailSpec("model_reply", "t01", "sent", md.email, [cfo.email], at(day0 - timedelta(days=6), 11, 40),
                 f"RE: {project}: updated management case", "Thanks, the team is reviewing it today.",
                 cc=[vp.email]),
        MailSpec("comps", "t02", "inbox", vp.email, [md.email, associate.email], at(day0 - timedelta(days=5), 17, 5),
                 "Comps refresh", f"Refreshed the trading comps (6 names). The median is {deal.comp_median}x.",
                 attachments=[COMPS]),
        MailSpec("net_debt", "t03", "inbox", cfo.email, [md.email, vp.email], at(day0 - timedelta(days=4), 8, 30),
                 "Net debt at close",
                 f"Our latest estimate of net debt at close is USD {deal.inputs.net_debt}m, consistent with the "
                 "model."),
        MailSpec("memo", "t04", "inbox", associate.email, [md.email, vp.email], at(day0 - timedelta(days=3), 19, 20),
                 "IC memo draft", "Draft IC memo attached for your comments.", attachments=[MEMO]),
        MailSpec("memo_reply", "t04", "sent", md.email, [associate.email], at(day0 - timedelta(days=2), 7, 55),
                 "RE: IC memo draft", "Looks good. Please add the customer concentration point to the risks."),
        MailSpec("process", "t05", "inbox", seller.email, [md.email], at(day0 - timedelta(days=1), 15, 0),
                 f"{target}: process letter",
                 f"Second-round bids for {target} are due by {deadline.isoformat()} at 17:00 CET. "
                 "The target overview is attached.", attachments=[REPORT]),
        MailSpec("letter", "t06", "inbox", cfo.email, [md.email], at(day0 - timedelta(days=1), 16, 45),
                 "Signed engagement letter", "Please find the countersigned engagement letter attached.",
                 attachments=[LETTER]),
    ]  # fmt: skip


def _chat(deal: Deal) -> list[ChatSpec]:
    md, vp, associate, analyst, _, _ = deal.people
    day0, terms = deal.day0, deal.terms
    return [
        ChatSpec("model_path", "deal-team", analyst.name, at(day0, 8, 40), f"Model v3 is on the drive: {MODEL}"),
        ChatSpec("premium", "deal-team", vp.name, at(day0, 9, 5),
                 f"For the offer price sensitivity use a {terms.premium}% control premium over the current share "
                 "price."),
        ChatSpec("data_room", "deal-team", associate.name, at(day0, 9, 30),
                 f"Data room access code is {terms.data_room_code}"),
        ChatSpec("deck", "deal-team", md.name, at(day0, 10, 15), f"Board deck is in {DECK}; keep it in sync."),
        ChatSpec("lunch", "general", analyst.name, at(day0, 12, 0), "Team lunch at 12:30 in the usual place."),
        ChatSpec("it", "general", associate.name, at(day0, 14, 10), "VPN maintenance tonight from 22:00."),
    ]  # fmt: skip


def _events(deal: Deal) -> list[EventSpec]:
    md, vp, associate, analyst, cfo, seller = deal.people
    project, target, day0, deadline = deal.project, deal.counterparty, deal.day0, deal.terms.bid_deadline
    team = [md.email, vp.email, associate.email, analyst.email]
    ic_day = day0 + timedelta(days=3)
    return [
        EventSpec("client_call", f"{project} weekly client call", at(day0 + timedelta(days=1), 9),
                  at(day0 + timedelta(days=1), 9, 30), [*team, cfo.email], "Video call", "Weekly status update."),
        EventSpec("model_review", "Model review", at(day0 + timedelta(days=2), 16), at(day0 + timedelta(days=2), 17),
                  team, "Room 4B", f"Walk through {MODEL}."),
        EventSpec("ic", "Investment committee", at(ic_day, 14), at(ic_day, 15, 30), [md.email, vp.email],
                  "Board room", f"Present the IC memo for {project}."),
        EventSpec("mgmt", f"Management presentation — {target}", at(day0 + timedelta(days=8), 10),
                  at(day0 + timedelta(days=8), 12), [*team, seller.email], f"{target} HQ, {deal.city}",
                  "Management presentation and site visit."),
        EventSpec("deadline", "Second-round bid deadline", at(deadline, 17), at(deadline, 17, 30),
                  [md.email, vp.email], "", f"Bids for {target} due."),
    ]  # fmt: skip


build = DomainWorld(
    draw=_draw_deal,
    files={"model": MODEL, "comps": COMPS, "memo": MEMO, "letter": LETTER, "report": REPORT, "deck": DECK},
    workbooks={MODEL: (_assumptions_sheet, _model_sheet, _valuation_sheet), COMPS: (_comps_sheet,)},
    documents=(_memo, _letter),
    deck=_board_deck,
    report=_target_overview,
    texts=_texts,
    mail=_mail,
    chat=_chat,
    events=_events,
)
