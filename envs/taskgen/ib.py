"""Investment-banking tasks: valuation arithmetic across the model, comps, letter, mail, chat, calendar and pdf;
deliverables that change model assumptions or write a memo, a slide or a CSV."""

from __future__ import annotations

from envs.taskgen import read
from envs.taskgen.common import DomainTasks, TableChangeTask, TaskDraft, calendar_days, inputs_of, standard_task
from envs.taskgen.deliverables import Aggregate, ExportTask, Line, WriteUpTask, what_if_task
from envs.taskgen.steps import compute, days_between
from envs.worlds import WorldFacts
from envs.worlds.facts import IbInputs
from envs.worlds.ib import YEARS, enterprise_value, operating_model

# --- standard: one answer computed from values in two or more places -------------------------------------------------


def _ev_at_median_multiple(facts: WorldFacts) -> TaskDraft:
    c, f = facts.cells, facts.files
    model, comps = f["model"], f["comps"]
    ebitda27, median = c["ebitda_FY2027E"], c["comps_median"]
    return standard_task(
        f"Apply the median EV/EBITDA multiple of the comparables in {comps} to the FY2027E EBITDA in {model} "
        "(sheet Model). What enterprise value does that imply, in USD m?",
        median.value * ebitda27.value,
        [read.cell(median, "multiple"), read.cell(ebitda27, "ebitda"), compute("${multiple} * ${ebitda}", 2)],
        [comps, model],
    )


def _equity_after_mailed_net_debt(facts: WorldFacts) -> TaskDraft:
    ev, model = facts.cells["enterprise_value"], facts.files["model"]
    return standard_task(
        "The client's CFO emailed the latest estimate of net debt at close. Subtract it from the enterprise value "
        f"on the Valuation sheet of {model}. What equity value results, in USD m?",
        ev.value - float(facts.texts["mail_net_debt"].value),
        [
            *read.mail("net debt at close", "net_debt", r"net debt at close is USD ([\d.]+)m"),
            read.cell(ev, "ev"),
            compute("${ev} - ${net_debt}", 2),
        ],
        [model],
    )


def _success_fee(facts: WorldFacts) -> TaskDraft:
    t, ev = facts.texts, facts.cells["enterprise_value"]
    model, letter = facts.files["model"], facts.files["letter"]
    return standard_task(
        f"Under the engagement letter ({letter}), what success fee is due in USD m if the deal closes at the "
        f"enterprise value on the Valuation sheet of {model}? Apply the minimum fee if it is higher.",
        max(float(t["min_fee"].value), float(t["fee_pct"].value) / 100 * ev.value),
        [
            read.document(letter, "pct", r"success fee equal to ([\d.]+)%"),
            read.document(letter, "minimum", r"minimum fee of USD ([\d.]+)m"),
            read.cell(ev, "ev"),
            compute("max(${minimum}, ${pct} / 100 * ${ev})", 4),
        ],
        [letter, model],
    )


def _revenue_cagr(facts: WorldFacts) -> TaskDraft:
    c, model = facts.cells, facts.files["model"]
    return standard_task(
        f"What is the compound annual growth rate of revenue from FY2025A to FY2029E in {model} (sheet Model), "
        "in percent?",
        ((c["revenue_FY2029E"].value / c["revenue_FY2025A"].value) ** 0.25 - 1) * 100,
        [
            read.cell(c["revenue_FY2025A"], "first"),
            read.cell(c["revenue_FY2029E"], "last"),
            compute("((${last} / ${first}) ** 0.25 - 1) * 100", 4),
        ],
        [model],
    )


def _days_from_ic_to_bid_deadline(facts: WorldFacts) -> TaskDraft:
    return standard_task(
        "How many calendar days are there from the investment committee meeting in the calendar to the "
        "second-round bid deadline in reference/bid_deadline.txt?",
        calendar_days(facts.event("ic").start[:10], facts.texts["bid_deadline"].value),
        [
            *read.event_start("investment committee"),
            read.text_file("reference/bid_deadline.txt", "deadline"),
            days_between("start", "deadline"),
        ],
        ["reference/bid_deadline.txt"],
    )


def _largest_customer_revenue(facts: WorldFacts) -> TaskDraft:
    revenue, model, report = facts.cells["revenue_FY2025A"], facts.files["model"], facts.files["report"]
    return standard_task(
        f"The target overview ({report}) states what share of FY2025 revenue came from the largest customer. "
        f"Using FY2025A revenue in {model} (sheet Model), how much revenue in USD m came from that customer?",
        float(facts.pdf.wrapped_value) / 100 * revenue.value,
        [
            read.report(facts.pdf, "share", r"accounted\s+for\s+(\d+)\s+percent"),
            read.cell(revenue, "revenue"),
            compute("${share} / 100 * ${revenue}", 3),
        ],
        [report, model],
    )


_ebitda_growth_in_report = TableChangeTask(
    "According to the financials table on page 3 of {report}, by how much (USD m) does EBITDA grow from FY2025A to "
    "FY2029E?",
    row_label="EBITDA",
    first="ebitda_FY2025A",
    last="ebitda_FY2029E",
)


def _offer_price(facts: WorldFacts) -> TaskDraft:
    t = facts.texts
    return standard_task(
        "The deal-team chat gives the control premium to use over the target's current share price "
        "(reference/target_share_price_usd.txt). What offer price per share in USD does it imply?",
        float(t["share_price"].value) * (1 + float(t["control_premium"].value) / 100),
        [
            read.chat("control premium", "premium", r"use a (\d+)% control premium"),
            read.text_file("reference/target_share_price_usd.txt", "price"),
            compute("${price} * (1 + ${premium} / 100)", 4),
        ],
        ["reference/target_share_price_usd.txt"],
    )


def _ev_in_eur(facts: WorldFacts) -> TaskDraft:
    ev, model = facts.cells["enterprise_value"], facts.files["model"]
    return standard_task(
        f"Convert the enterprise value on the Valuation sheet of {model} into EUR m using the EUR/USD rate "
        "(USD per EUR) in reference/fx_eur_usd.txt.",
        ev.value / float(facts.texts["fx_eur_usd"].value),
        [read.cell(ev, "ev"), read.text_file("reference/fx_eur_usd.txt", "fx"), compute("${ev} / ${fx}", 4)],
        [model, "reference/fx_eur_usd.txt"],
    )


# --- deliverables: change the model, write a summary or a slide, export a CSV ----------------------------------------


def _raise_growth(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, IbInputs)
    c, model = facts.cells, facts.files["model"]
    growth_cell = c["growth_FY2027E"]
    new_growth = round(inputs.growth[1] + (0.03 if inputs.growth[1] < 0.1 else -0.03), 2)
    grown = operating_model(inputs.model_copy(update={"growth": [*inputs.growth[:1], new_growth, *inputs.growth[2:]]}))
    return what_if_task(
        f"Management now expects FY2027E revenue growth of {new_growth * 100:.0f}%. Update the growth assumption "
        f"on the Assumptions sheet of {model} (as a fraction, cell {growth_cell.cell}) and report the resulting "
        "FY2029E EBITDA in USD m. Do not change the comps workbook.",
        (growth_cell, new_growth),
        (c["ebitda_FY2029E"], "ebitda", grown.ebitda[4]),
        facts.files["comps"],
    )


def _cut_cogs(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, IbInputs)
    c, model = facts.cells, facts.files["model"]
    cogs_cell = c["cogs_pct_FY2028E"]
    new_cogs = round(inputs.cogs_pct[3] - 0.02, 2)
    cogs_path = [*inputs.cogs_pct[:3], new_cogs, *inputs.cogs_pct[4:]]
    leaner = operating_model(inputs.model_copy(update={"cogs_pct": cogs_path}))
    return what_if_task(
        f"Procurement savings cut FY2028E COGS to {new_cogs * 100:.0f}% of revenue. Set that assumption on the "
        f"Assumptions sheet of {model} (a fraction, cell {cogs_cell.cell}) and report the new cumulative EBITDA "
        "FY2026E–FY2029E (Model sheet) in USD m. Leave the IC memo untouched.",
        (cogs_cell, new_cogs),
        (c["cumulative_ebitda"], "cumulative", sum(leaner.ebitda[1:])),
        facts.files["memo"],
        also=((c["ebitda_FY2028E"], leaner.ebitda[3]),),
    )


def _revalue_at_new_multiple(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, IbInputs)
    c, model = facts.cells, facts.files["model"]
    new_multiple = round(inputs.multiple + 1.5, 1)
    revalued = inputs.model_copy(update={"multiple": new_multiple})
    return what_if_task(
        f"The committee wants to see the valuation at {new_multiple}x EBITDA. Change the multiple on the "
        f"Assumptions sheet of {model} (cell {c['assumed_multiple'].cell}) and report the resulting equity value "
        "(Valuation sheet) in USD m.",
        (c["assumed_multiple"], new_multiple),
        (c["equity_value"], "equity", enterprise_value(revalued, operating_model(revalued)) - inputs.net_debt),
        facts.files["comps"],
    )


_valuation_summary = WriteUpTask(
    "Valuation summary",
    (Line("Enterprise value: USD ", "enterprise_value", "m"), Line("Equity value: USD ", "equity_value", "m")),
    guard="model",
    document="docs/valuation_summary.docx",
)
_comps_slide = WriteUpTask(
    "Comparable companies",
    (Line("Median EV/EBITDA: ", "comps_median", "x"), Line("Mean EV/EBITDA: ", "comps_mean", "x")),
    guard="comps",
)


_export_ebitda = ExportTask(
    "Export EBITDA per year from the Model sheet of {model} to {path} with the header 'year,ebitda' and one row per "
    "year (FY2025A to FY2029E). Then reply with the sum of the five EBITDA values in USD m.",
    path="exports/ebitda_by_year.csv",
    header="year,ebitda",
    rows=tuple((year, f"e{index}", f"ebitda_{year}") for index, year in enumerate(YEARS)),
    source="model",
    aggregate=Aggregate.SUM,
)


tasks = DomainTasks(
    standard=(
        _ev_at_median_multiple,
        _equity_after_mailed_net_debt,
        _success_fee,
        _revenue_cagr,
        _days_from_ic_to_bid_deadline,
        _largest_customer_revenue,
        _ebitda_growth_in_report,
        _offer_price,
        _ev_in_eur,
    ),
    deliverable=(
        _raise_growth,
        _cut_cogs,
        _revalue_at_new_multiple,
        _valuation_summary,
        _comps_slide,
        _export_ebitda,
    ),
)
