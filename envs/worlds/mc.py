"""Management-consulting worlds: a growth-strategy engagement for a consumer client.

Files: a customer survey workbook (Responses → Summary with COUNTA/AVERAGE/COUNTIF/AVERAGEIF), a market-sizing model
(Inputs → Sizing, cross-sheet formulas), a steering-committee memo and a statement of work (.docx), a market study
(.pdf: two-column page + table page), an interim-findings deck (.pptx), one-value reference files, and mail, chat and
calendar around the engagement.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta

from envs.worlds.apps import ChatSpec, EventSpec, MailSpec, at
from envs.worlds.content import base_day, clean, excel_round, money, near_tie
from envs.worlds.domain import CastSpec, DomainWorld, Story, briefing_deck, draw_cast
from envs.worlds.facts import CellFact, McInputs, TextFact
from envs.worlds.render import DeckSpec, DocSpec, PdfSpec, SheetSpec, SlideSpec
from envs.worlds.sheets import SheetBuilder
from envs.worlds.sources import Report, reference, report, stated

SURVEY = "data/customer_survey.xlsx"
SIZING = "models/market_sizing.xlsx"
MEMO = "docs/steering_committee_memo.docx"
SOW = "docs/statement_of_work.docx"
REPORT = "reports/market_study.pdf"
DECK = "presentations/interim_findings.pptx"
REGIONS = ["North", "South", "East", "West"]
SEGMENTS = ["Value", "Mainstream", "Premium"]
YEARS = ["2026", "2027E", "2028E", "2029E"]
YEAR_COLUMNS = ["B", "C", "D", "E"]
CATEGORIES = ["home fitness equipment", "plant-based foods", "pet care", "premium coffee", "outdoor apparel"]
CAST = CastSpec(
    companies=2,  # client and its main competitor
    suffixes=("Retail", "Brands", "Foods", "Outfitters"),
    adviser_suffix="Consulting",
    adviser_mail="consulting.com",
    team=("Partner", "Engagement Manager", "Consultant", "Analyst"),
    outsiders=(("Client COO", None), ("Client Head of Strategy", None)),
)


@dataclass(frozen=True)
class SurveySummary:
    """The Summary sheet as its formulas compute it (averages rounded to 2 decimals, NPS to 1)."""

    responses: int
    avg_satisfaction: float
    promoters: int
    detractors: int
    nps: float
    avg_spend: float
    region_counts: dict[str, int]
    region_satisfaction: dict[str, float]
    segment_counts: dict[str, int]


def survey_summary(inputs: McInputs) -> SurveySummary:
    """NPS = ROUND((promoters − detractors)/responses·100, 1), promoters score 9–10, detractors 0–6."""
    rows = inputs.responses
    promoters = sum(1 for r in rows if r[4] >= 9)
    detractors = sum(1 for r in rows if r[4] <= 6)
    by_region = {region: [r[3] for r in rows if r[1] == region] for region in REGIONS}
    return SurveySummary(
        responses=len(rows),
        avg_satisfaction=excel_round(sum(r[3] for r in rows) / len(rows), 2),
        promoters=promoters,
        detractors=detractors,
        nps=excel_round((promoters - detractors) / len(rows) * 100, 1),
        avg_spend=excel_round(sum(r[5] for r in rows) / len(rows), 2),
        region_counts={region: len(scores) for region, scores in by_region.items()},
        region_satisfaction={region: excel_round(sum(s) / len(s), 2) for region, s in by_region.items()},
        segment_counts={segment: sum(1 for r in rows if r[2] == segment) for segment in SEGMENTS},
    )


@dataclass(frozen=True)
class MarketSizing:
    """TAM = ROUND(households·category share·spend, 1) (USD m); SAM = ROUND(TAM·premium share, 1);
    SOM = ROUND(SAM·client share, 1); TAM_t = ROUND(TAM_{t-1}·(1+growth), 1)."""

    tam: float
    sam: float
    som: float
    tam_by_year: list[float]


def market_sizing(inputs: McInputs) -> MarketSizing:
    tam = excel_round(inputs.households_m * inputs.category_share * inputs.annual_spend, 1)
    sam = excel_round(tam * inputs.premium_share, 1)
    tam_by_year = [tam]
    for _ in YEARS[1:]:
        tam_by_year.append(excel_round(tam_by_year[-1] * (1 + inputs.market_growth), 1))
    return MarketSizing(tam=tam, sam=sam, som=excel_round(sam * inputs.client_share, 1), tam_by_year=tam_by_year)


def _rounded_quantities(inputs: McInputs) -> list[tuple[float, int]]:
    """Every value a ROUND in the workbooks is applied to, with its digits (to reject inputs that sit on a tie)."""
    rows = inputs.responses
    summary = survey_summary(inputs)
    quantities = [
        (sum(r[3] for r in rows) / len(rows), 2),
        (sum(r[5] for r in rows) / len(rows), 2),
        ((summary.promoters - summary.detractors) / len(rows) * 100, 1),
    ]
    for region in REGIONS:
        scores = [r[3] for r in rows if r[1] == region]
        quantities.append((sum(scores) / len(scores), 2))
    sizing = market_sizing(inputs)
    quantities += [
        (inputs.households_m * inputs.category_share * inputs.annual_spend, 1),
        (sizing.tam * inputs.premium_share, 1),
        (sizing.sam * inputs.client_share, 1),
    ]
    quantities += [(tam * (1 + inputs.market_growth), 1) for tam in sizing.tam_by_year[:-1]]
    return quantities


def _sample_inputs(rng: random.Random) -> McInputs:
    while True:
        count = rng.randrange(30, 41)
        responses = []
        for number in range(1, count + 1):
            segment = rng.choices(SEGMENTS, weights=[3, 5, 2])[0]
            satisfaction = max(1, min(10, round(rng.gauss(7, 1.8))))
            recommend = max(0, min(10, satisfaction + rng.choice([-2, -1, 0, 0, 1])))
            spend = round(rng.uniform(20, 60) * (1.6 if segment == "Premium" else 1.0), 2)
            responses.append((f"R{number:03d}", REGIONS[(number - 1) % 4], segment, satisfaction, recommend, spend))
        inputs = McInputs(
            households_m=round(rng.uniform(8, 30), 1),
            category_share=rng.randrange(15, 46) / 100,
            annual_spend=float(rng.randrange(180, 900, 5)),
            premium_share=rng.randrange(18, 36) / 100,
            client_share=rng.randrange(8, 25) / 100,
            market_growth=rng.randrange(2, 9) / 100,
            responses=responses,
        )
        if not any(near_tie(value, digits) for value, digits in _rounded_quantities(inputs)):
            return inputs


@dataclass(frozen=True)
class Terms:
    """Figures drawn after the workbooks: the statement of work's fees, shopper panel results, reference values and
    the market study's colour."""

    weekly_fee: int
    weeks: int
    expenses: int
    switch_now: int
    switch_before: int
    share_gain: int
    engagement_code: str
    store_count: int
    fieldwork_end: date
    competitor_stores: int
    online_share: int


def _draw_terms(rng: random.Random, day0: date) -> Terms:
    # Keyword arguments are evaluated in order: this order is the random stream's, so it fixes the world's bytes.
    return Terms(
        weekly_fee=rng.randrange(60, 181, 5),
        weeks=rng.randrange(6, 15),
        expenses=rng.choice([8, 10, 12, 15]),
        switch_now=rng.randrange(21, 39),
        switch_before=rng.randrange(9, 20),
        share_gain=rng.randrange(2, 6),
        engagement_code=f"ENG-{rng.randrange(10000, 99999)}",
        store_count=rng.randrange(80, 600),
        fieldwork_end=day0 - timedelta(days=rng.randrange(10, 25)),
        competitor_stores=rng.randrange(12, 40),
        online_share=rng.randrange(18, 35),
    )


@dataclass(frozen=True)
class Engagement(Story[McInputs]):
    """The engagement's story: the firm (the adviser) works on a growth strategy for the client, whose main
    competitor is the counterparty."""

    category: str
    summary: SurveySummary
    sizing: MarketSizing
    terms: Terms


def _draw_engagement(rng: random.Random) -> Engagement:
    cast = draw_cast(rng, CAST)
    category = rng.choice(CATEGORIES)
    day0 = base_day(rng)
    inputs = _sample_inputs(rng)
    return Engagement(
        cast=cast, day0=day0, inputs=inputs, category=category, summary=survey_summary(inputs),
        sizing=market_sizing(inputs), terms=_draw_terms(rng, day0),
    )  # fmt: skip


# --- the survey and market-sizing workbooks --------------------------------------------------------------------------


def _responses_sheet(job: Engagement, cells: dict[str, CellFact]) -> SheetSpec:
    responses = SheetBuilder(SURVEY, "Responses", cells)
    responses.row(1, ["Respondent", "Region", "Segment", "Satisfaction (1-10)", "Likelihood to recommend (0-10)",
                      "Monthly spend (USD)"], bold=True)  # fmt: skip
    for offset, row in enumerate(job.inputs.responses):
        number = offset + 2
        responses.row(number, list(row[:3]))
        responses.put(f"D{number}", row[3], fact=f"satisfaction_{row[0]}", label=f"satisfaction of {row[0]}")
        responses.put(f"E{number}", row[4], fact=f"recommend_{row[0]}", label=f"likelihood to recommend of {row[0]}")
        responses.put(f"F{number}", row[5], fact=f"spend_{row[0]}", label=f"monthly spend of {row[0]}", unit="USD")
    return responses.spec({"A": 12, "E": 30})


def _summary_sheet(job: Engagement, cells: dict[str, CellFact]) -> SheetSpec:
    summary, last = job.summary, len(job.inputs.responses) + 1
    survey = SheetBuilder(SURVEY, "Summary", cells, title=f"{job.project} — customer survey summary")
    survey.formulas([
        (3, "responses", "Responses", f"=COUNT(Responses!D2:D{last})", summary.responses),
        (4, "avg_satisfaction", "Average satisfaction", f"=ROUND(AVERAGE(Responses!D2:D{last}),2)",
         summary.avg_satisfaction),
        (5, "promoters", "Promoters (9-10)", f'=COUNTIF(Responses!E2:E{last},">=9")', summary.promoters),
        (6, "detractors", "Detractors (0-6)", f'=COUNTIF(Responses!E2:E{last},"<=6")', summary.detractors),
        (7, "nps", "Net promoter score", "=ROUND((B5-B6)/B3*100,1)", summary.nps),
        (8, "avg_spend", "Average monthly spend (USD)", f"=ROUND(AVERAGE(Responses!F2:F{last}),2)", summary.avg_spend),
    ])  # fmt: skip
    survey.row(10, ["Region", "Responses", "Average satisfaction"], bold=True)
    for offset, region in enumerate(REGIONS):
        row = 11 + offset
        survey.put(f"A{row}", region)
        survey.put(f"B{row}", f'=COUNTIF(Responses!B2:B{last},"{region}")', fact=f"responses_{region}",
                   label=f"responses from {region}", computed=summary.region_counts[region])  # fmt: skip
        survey.put(f"C{row}", f'=ROUND(AVERAGEIF(Responses!B2:B{last},"{region}",Responses!D2:D{last}),2)',
                   fact=f"satisfaction_{region}", label=f"average satisfaction in {region}",
                   computed=summary.region_satisfaction[region])  # fmt: skip
    survey.row(16, ["Segment", "Responses"], bold=True)
    for offset, segment in enumerate(SEGMENTS):
        row = 17 + offset
        survey.put(f"A{row}", segment)
        survey.put(f"B{row}", f'=COUNTIF(Responses!C2:C{last},"{segment}")', fact=f"responses_{segment}",
                   label=f"{segment} respondents", computed=summary.segment_counts[segment])  # fmt: skip
    return survey.spec({"A": 30})


def _inputs_sheet(job: Engagement, cells: dict[str, CellFact]) -> SheetSpec:
    inputs = job.inputs
    assumptions = SheetBuilder(SIZING, "Inputs", cells, title=f"{job.project} — market sizing inputs ({job.category})")
    assumptions.inputs(
        [
            (3, "households_m", "Households (millions)", inputs.households_m),
            (4, "category_share", "Share of households buying the category", inputs.category_share),
            (5, "annual_spend", "Annual spend per buying household (USD)", inputs.annual_spend),
            (6, "premium_share", "Premium segment share of spend", inputs.premium_share),
            (7, "client_share", "Client share of the premium segment", inputs.client_share),
            (8, "market_growth", "Annual market growth", inputs.market_growth),
        ]
    )
    return assumptions.spec({"A": 44})


def _sizing_sheet(job: Engagement, cells: dict[str, CellFact]) -> SheetSpec:
    sizing = job.sizing
    model = SheetBuilder(SIZING, "Sizing", cells, title=f"{job.project} — market sizing (USD m)")
    model.formulas(
        [
            (3, "tam", "Total addressable market (TAM)", "=ROUND(Inputs!B3*Inputs!B4*Inputs!B5,1)", sizing.tam),
            (4, "sam", "Premium segment (SAM)", "=ROUND(B3*Inputs!B6,1)", sizing.sam),
            (5, "som", "Client revenue in the premium segment (SOM)", "=ROUND(B4*Inputs!B7,1)", sizing.som),
            (6, "client_tam_share", "Client share of TAM", "=B5/B3", clean(sizing.som / sizing.tam)),
        ]
    )
    model.row(8, ["USD m", *YEARS], bold=True)
    model.put("A9", "TAM")
    for index, (column, year) in enumerate(zip(YEAR_COLUMNS, YEARS, strict=True)):
        formula = f"=ROUND({YEAR_COLUMNS[index - 1]}9*(1+Inputs!$B$8),1)" if index else "=B3"
        model.put(f"{column}9", formula, fact=f"tam_{year}", label=f"TAM {year}", computed=sizing.tam_by_year[index],
                  unit="USD m")  # fmt: skip
    return model.spec({"A": 44})


# --- documents, the market study and the interim deck ----------------------------------------------------------------


def _region_table(summary: SurveySummary) -> list[list[str]]:
    """Responses and average satisfaction per region, as the memo and the deck show them."""
    return [["Region", "Responses", "Average satisfaction"],
            *[[r, str(summary.region_counts[r]), str(summary.region_satisfaction[r])] for r in REGIONS]]  # fmt: skip


def _memo(job: Engagement) -> DocSpec:
    summary, sizing, client = job.summary, job.sizing, job.client
    return DocSpec(
        MEMO,
        f"Steering committee memo — {job.project}",
        [
            f"To: {client} steering committee. From: {job.people[0].name}, {job.adviser}. Date: "
            f"{job.day0.isoformat()}.",
            f"The customer survey ({summary.responses} responses) gives an average satisfaction of "
            f"{summary.avg_satisfaction} out of 10 and a net promoter score of {summary.nps}.",
            f"We size the {job.category} market at USD {sizing.tam}m, of which the premium segment is USD "
            f"{sizing.sam}m. {client}'s premium revenue is USD {sizing.som}m.",
            _region_table(summary),
            f"Recommendation: prioritise the premium segment, where {job.counterparty} is gaining share.",
        ],
    )


def _statement_of_work(job: Engagement) -> DocSpec:
    terms, firm = job.terms, job.adviser
    return DocSpec(
        SOW,
        f"Statement of work — {firm} and {job.client}",
        [
            f"{firm} will support {job.client} on {job.project}: a growth strategy for the {job.category} business.",
            f"Fees. A weekly fee of USD {terms.weekly_fee}k for {terms.weeks} weeks.",
            f"Expenses. Travel and other expenses are billed at {terms.expenses}% of fees.",
            "Deliverables. Market sizing, customer research, and a prioritised growth plan.",
        ],
    )


def _market_study(job: Engagement) -> Report:
    terms, category, client = job.terms, job.category, job.client
    wrapped = (
        f"Among premium shoppers in the panel, the share who switched their main {category} retailer in the past "
        f"year rose to {terms.switch_now} percent, up from {terms.switch_before} percent a year earlier."
    )
    spec = PdfSpec(
        REPORT,
        f"The {category} market — market study for {client}",
        [
            f"This study was prepared by {job.adviser} for {client} as part of {job.project}.",
            f"It combines a panel of shoppers, {job.summary.responses} customer interviews and public market data.",
        ],
        "Shopper behaviour",
        [
            f"Shoppers increasingly compare prices online before buying. {wrapped} Loyalty schemes had little "
            "measurable effect on switching.",
            "Promotional intensity rose in the second half of the year, led by discount chains and online-only "
            "entrants competing on delivery speed.",
            "Premium shoppers cite product range and staff expertise as the main reasons to stay.",
        ],
        [
            f"{job.counterparty} opened {terms.competitor_stores} stores last year and now advertises heavily in "
            "regional television and social media campaigns.",
            f"Online penetration of the category reached {terms.online_share} percent of sales, with the "
            "fastest growth among younger households in urban areas.",
            "Private-label ranges account for a growing share of the value segment, pressuring branded suppliers.",
        ],
        "Market size",
        [["USD m", *YEARS], ["TAM", *(money(v) for v in job.sizing.tam_by_year)]],
    )
    label = "percent of premium shoppers who switched retailer in the past year"
    return report(spec, wrapped, str(terms.switch_now), label)


def _interim_deck(job: Engagement) -> DeckSpec:
    summary = job.summary
    what_customers_said = [
        f"Average satisfaction {summary.avg_satisfaction} / 10 across {summary.responses} responses",
        f"Net promoter score {summary.nps}",
        f"Average monthly spend USD {summary.avg_spend}",
    ]
    return briefing_deck(
        DECK, job, "interim findings", SlideSpec("What customers told us", what_customers_said),
        SlideSpec("Satisfaction by region", table=_region_table(summary)),
        ["Validate sizing with the client's finance team", "Prepare the growth plan"],
    )  # fmt: skip


# --- facts stated outside the workbooks: reference files, documents and chat -----------------------------------------


def _texts(job: Engagement) -> dict[str, TextFact]:
    terms, summary, sizing = job.terms, job.summary, job.sizing
    return {
        "engagement_code": reference("engagement code", "engagement_code", terms.engagement_code),
        "store_count": reference("client store count", "client_store_count", terms.store_count),
        "fieldwork_end": reference("survey fieldwork end date", "survey_fieldwork_end", terms.fieldwork_end),
        "project_name": reference("project name", "project_name", job.project),
        "weekly_fee": stated("weekly fee (USD k)", SOW, terms.weekly_fee),
        "weeks": stated("engagement length (weeks)", SOW, terms.weeks),
        "expenses_pct": stated("expenses (% of fees)", SOW, terms.expenses),
        "memo_nps": stated("net promoter score in the memo", MEMO, summary.nps),
        "memo_tam": stated("TAM in the memo", MEMO, sizing.tam),
        "memo_som": stated("client premium revenue in the memo", MEMO, sizing.som),
        "share_gain": stated("target premium share gain (percentage points)", "chat:share_gain", terms.share_gain),
        "competitor": stated("main competitor", MEMO, job.counterparty),
    }


def _mail(job: Engagement) -> list[MailSpec]:
    partner, manager, consultant, analyst, coo, strategy = job.people
    project, day0 = job.project, job.day0
    return [
        MailSpec("sow", "t01", "inbox", strategy.email, [partner.email], at(day0 - timedelta(days=9), 10, 5),
                 f"{project}: signed statement of work", "Signed SOW attached. Looking forward to the kick-off.",
                 attachments=[SOW]),
        MailSpec("sow_reply", "t01", "sent", partner.email, [strategy.email], at(day0 - timedelta(days=9), 12, 30),
                 f"RE: {project}: signed statement of work", "Thank you, we will send the kick-off agenda shortly."),
        MailSpec("survey", "t02", "inbox", coo.email, [manager.email], at(day0 - timedelta(days=7), 16, 20),
                 "Customer survey results",
                 f"The survey closed on {job.terms.fieldwork_end.isoformat()}; raw responses attached.",
                 cc=[partner.email], attachments=[SURVEY]),
        MailSpec("survey_reply", "t02", "sent", manager.email, [coo.email], at(day0 - timedelta(days=7), 17, 45),
                 "RE: Customer survey results", "Thanks, we will summarise them for the steering committee."),
        MailSpec("sizing", "t03", "inbox", consultant.email, [manager.email, partner.email],
                 at(day0 - timedelta(days=4), 18, 10), "Market sizing v2",
                 f"Updated sizing attached: TAM USD {job.sizing.tam}m.", attachments=[SIZING]),
        MailSpec("memo", "t04", "inbox", manager.email, [partner.email], at(day0 - timedelta(days=2), 20, 0),
                 "SteerCo memo draft", "Draft memo for Thursday attached.", attachments=[MEMO]),
        MailSpec("study", "t05", "inbox", analyst.email, [manager.email], at(day0 - timedelta(days=1), 11, 15),
                 "Market study PDF", "The final market study from the research team.", attachments=[REPORT]),
    ]  # fmt: skip


def _chat(job: Engagement) -> list[ChatSpec]:
    partner, manager, consultant, analyst, _, _ = job.people
    day0 = job.day0
    return [
        ChatSpec("survey_path", "case-team", analyst.name, at(day0, 8, 50), f"Survey data is in {SURVEY}"),
        ChatSpec("share_gain", "case-team", partner.name, at(day0, 9, 20),
                 f"The client's ambition is to gain {job.terms.share_gain} percentage points of premium share by "
                 "2029."),
        ChatSpec("sizing_note", "case-team", consultant.name, at(day0, 10, 0),
                 f"Sizing model is {SIZING}; inputs on the Inputs sheet."),
        ChatSpec("deck", "case-team", manager.name, at(day0, 11, 30), f"Interim deck: {DECK}"),
        ChatSpec("coffee", "office", analyst.name, at(day0, 15, 0), "New coffee machine on floor 3."),
    ]  # fmt: skip


def _events(job: Engagement) -> list[EventSpec]:
    partner, manager, consultant, analyst, coo, strategy = job.people
    day0, weeks = job.day0, job.terms.weeks
    team = [partner.email, manager.email, consultant.email, analyst.email]
    steerco_day = day0 + timedelta(days=3)
    return [
        EventSpec("kickoff", f"{job.project} kick-off", at(day0 - timedelta(days=8), 10),
                  at(day0 - timedelta(days=8), 12), [*team, coo.email, strategy.email], f"{job.client} HQ",
                  "Engagement kick-off."),
        EventSpec("interviews", "Customer interviews", at(day0 + timedelta(days=1), 13),
                  at(day0 + timedelta(days=1), 17), [consultant.email, analyst.email], "Store visits", "Four stores."),
        EventSpec("steerco", "Steering committee", at(steerco_day, 15), at(steerco_day, 16, 30),
                  [partner.email, manager.email, coo.email, strategy.email], "Board room", "Interim findings."),
        EventSpec("workshop", "Growth plan workshop", at(day0 + timedelta(days=9), 9),
                  at(day0 + timedelta(days=9), 12, 30), [*team, strategy.email], "Workshop room", "Prioritise levers."),
        EventSpec("readout", "Final readout", at(day0 + timedelta(days=7 * weeks // 2), 14),
                  at(day0 + timedelta(days=7 * weeks // 2), 15), [partner.email, coo.email], "Board room", ""),
    ]  # fmt: skip


build = DomainWorld(
    draw=_draw_engagement,
    files={"survey": SURVEY, "sizing": SIZING, "memo": MEMO, "sow": SOW, "report": REPORT, "deck": DECK},
    workbooks={SURVEY: (_responses_sheet, _summary_sheet), SIZING: (_inputs_sheet, _sizing_sheet)},
    documents=(_memo, _statement_of_work),
    deck=_interim_deck,
    report=_market_study,
    texts=_texts,
    mail=_mail,
    chat=_chat,
    events=_events,
)
