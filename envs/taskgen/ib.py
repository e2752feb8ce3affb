"""Investment-banking tasks: valuation arithmetic across the model, comps, letter, mail, chat, calendar and pdf;
deliverables that change model assumptions or write a memo, a slide or a CSV."""

from __future__ import annotations

from envs.taskgen.common import (
    Aggregate,
    CsvExport,
    DomainTasks,
    Line,
    TaskDraft,
    WriteUp,
    calendar_days,
    days_between,
    export_task,
    inputs_of,
    numeric,
    read_cell,
    read_document,
    read_event,
    read_message,
    read_text_file,
    run_python,
    table_row_change,
    write_cell,
    write_up_task,
)
from envs.types import FileUnchanged, Oracle, OracleStep, Tier, XlsxCellEquals
from envs.worlds import WorldFacts
from envs.worlds.facts import IbInputs
from envs.worlds.ib import YEARS, enterprise_value, operating_model

# --- standard: one answer computed from values in two or more places -------------------------------------------------


def _ev_at_median_multiple(facts: WorldFacts) -> TaskDraft:
    c, f = facts.cells, facts.files
    model, comps = f["model"], f["comps"]
    ebitda27, median = c["ebitda_FY2027E"], c["comps_median"]
    return TaskDraft(
        Tier.STANDARD,
        f"Apply the median EV/EBITDA multiple of the comparables in {comps} to the FY2027E EBITDA in {model} "
        "(sheet Model). What enterprise value does that imply, in USD m?",
        [numeric(median.value * ebitda27.value)],
        Oracle(
            steps=[read_cell(median, "multiple"), read_cell(ebitda27, "ebitda"),
                   run_python("print(round(${multiple} * ${ebitda}, 2))")],
            answer="${result}",
        ),
        [comps, model],
    )  # fmt: skip


def _equity_after_mailed_net_debt(facts: WorldFacts) -> TaskDraft:
    ev, model = facts.cells["enterprise_value"], facts.files["model"]
    return TaskDraft(
        Tier.STANDARD,
        "The client's CFO emailed the latest estimate of net debt at close. Subtract it from the enterprise value "
        f"on the Valuation sheet of {model}. What equity value results, in USD m?",
        [numeric(ev.value - float(facts.texts["mail_net_debt"].value))],
        Oracle(
            steps=[
                OracleStep(tool="mail.search_messages", args={"query": "net debt at close"}, save_as="message",
                           extract=r"^(m\d+) \|"),
                read_message("${message}", "net_debt", r"net debt at close is USD ([\d.]+)m"),
                read_cell(ev, "ev"),
                run_python("print(round(${ev} - ${net_debt}, 2))"),
            ],
            answer="${result}",
        ),
        [model],
    )  # fmt: skip


def _success_fee(facts: WorldFacts) -> TaskDraft:
    t, ev = facts.texts, facts.cells["enterprise_value"]
    model, letter = facts.files["model"], facts.files["letter"]
    return TaskDraft(
        Tier.STANDARD,
        f"Under the engagement letter ({letter}), what success fee is due in USD m if the deal closes at the "
        f"enterprise value on the Valuation sheet of {model}? Apply the minimum fee if it is higher.",
        [numeric(max(float(t["min_fee"].value), float(t["fee_pct"].value) / 100 * ev.value))],
        Oracle(
            steps=[
                read_document(letter, "pct", r"success fee equal to ([\d.]+)%"),
                read_document(letter, "minimum", r"minimum fee of USD ([\d.]+)m"),
                read_cell(ev, "ev"),
                run_python("print(round(max(${minimum}, ${pct} / 100 * ${ev}), 4))"),
            ],
            answer="${result}",
        ),
        [letter, model],
    )


def _revenue_cagr(facts: WorldFacts) -> TaskDraft:
    c, model = facts.cells, facts.files["model"]
    return TaskDraft(
        Tier.STANDARD,
        f"What is the compound annual growth rate of revenue from FY2025A to FY2029E in {model} (sheet Model), "
        "in percent?",
        [numeric(((c["revenue_FY2029E"].value / c["revenue_FY2025A"].value) ** 0.25 - 1) * 100)],
        Oracle(
            steps=[read_cell(c["revenue_FY2025A"], "first"), read_cell(c["revenue_FY2029E"], "last"),
                   run_python("print(round(((${last} / ${first}) ** 0.25 - 1) * 100, 4))")],
            answer="${result}",
        ),
        [model],
    )  # fmt: skip


def _days_from_ic_to_bid_deadline(facts: WorldFacts) -> TaskDraft:
    return TaskDraft(
        Tier.STANDARD,
        "How many calendar days are there from the investment committee meeting in the calendar to the "
        "second-round bid deadline in reference/bid_deadline.txt?",
        [numeric(calendar_days(facts.event("ic").start[:10], facts.texts["bid_deadline"].value))],
        Oracle(
            steps=[
                OracleStep(tool="calendar.search_events", args={"query": "investment committee"}, save_as="event",
                           extract=r"^(e\d+) \|"),
                read_event("${event}", "start", "start"),
                read_text_file("reference/bid_deadline.txt", "deadline"),
                days_between("start", "deadline"),
            ],
            answer="${result}",
        ),
        ["reference/bid_deadline.txt"],
    )  # fmt: skip


def _largest_customer_revenue(facts: WorldFacts) -> TaskDraft:
    revenue, model, report = facts.cells["revenue_FY2025A"], facts.files["model"], facts.files["report"]
    return TaskDraft(
        Tier.STANDARD,
        f"The target overview ({report}) states what share of FY2025 revenue came from the largest customer. "
        f"Using FY2025A revenue in {model} (sheet Model), how much revenue in USD m came from that customer?",
        [numeric(float(facts.pdf.wrapped_value) / 100 * revenue.value)],
        Oracle(
            steps=[
                OracleStep(tool="pdf.read_pdf", args={"path": report, "pages": "2"}, save_as="share",
                           extract=r"accounted\s+for\s+(\d+)\s+percent"),
                read_cell(revenue, "revenue"),
                run_python("print(round(${share} / 100 * ${revenue}, 3))"),
            ],
            answer="${result}",
        ),
        [report, model],
    )  # fmt: skip


def _ebitda_growth_in_report(facts: WorldFacts) -> TaskDraft:
    c, report = facts.cells, facts.files["report"]
    return TaskDraft(
        Tier.STANDARD,
        f"According to the financials table on page 3 of {report}, by how much (USD m) does EBITDA grow from "
        "FY2025A to FY2029E?",
        [numeric(c["ebitda_FY2029E"].value - c["ebitda_FY2025A"].value)],
        Oracle(steps=table_row_change(report, 3, "EBITDA"), answer="${result}"),
        [report],
    )


def _offer_price(facts: WorldFacts) -> TaskDraft:
    t = facts.texts
    return TaskDraft(
        Tier.STANDARD,
        "The deal-team chat gives the control premium to use over the target's current share price "
        "(reference/target_share_price_usd.txt). What offer price per share in USD does it imply?",
        [numeric(float(t["share_price"].value) * (1 + float(t["control_premium"].value) / 100))],
        Oracle(
            steps=[
                OracleStep(tool="chat.search_messages", args={"query": "control premium"}, save_as="premium",
                           extract=r"use a (\d+)% control premium"),
                read_text_file("reference/target_share_price_usd.txt", "price"),
                run_python("print(round(${price} * (1 + ${premium} / 100), 4))"),
            ],
            answer="${result}",
        ),
        ["reference/target_share_price_usd.txt"],
    )  # fmt: skip


def _ev_in_eur(facts: WorldFacts) -> TaskDraft:
    ev, model = facts.cells["enterprise_value"], facts.files["model"]
    return TaskDraft(
        Tier.STANDARD,
        f"Convert the enterprise value on the Valuation sheet of {model} into EUR m using the EUR/USD rate "
        "(USD per EUR) in reference/fx_eur_usd.txt.",
        [numeric(ev.value / float(facts.texts["fx_eur_usd"].value))],
        Oracle(
            steps=[read_cell(ev, "ev"), read_text_file("reference/fx_eur_usd.txt", "fx"),
                   run_python("print(round(${ev} / ${fx}, 4))")],
            answer="${result}",
        ),
        [model, "reference/fx_eur_usd.txt"],
    )  # fmt: skip


# --- deliverables: change the model, write a summary or a slide, export a CSV ----------------------------------------


def _raise_growth(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, IbInputs)
    c, model = facts.cells, facts.files["model"]
    growth_cell, ebitda29 = c["growth_FY2027E"], c["ebitda_FY2029E"]
    new_growth = round(inputs.growth[1] + (0.03 if inputs.growth[1] < 0.1 else -0.03), 2)
    grown = operating_model(inputs.model_copy(update={"growth": [*inputs.growth[:1], new_growth, *inputs.growth[2:]]}))
    return TaskDraft(
        Tier.DELIVERABLE,
        f"Management now expects FY2027E revenue growth of {new_growth * 100:.0f}%. Update the growth assumption "
        f"on the Assumptions sheet of {model} (as a fraction, cell {growth_cell.cell}) and report the resulting "
        "FY2029E EBITDA in USD m. Do not change the comps workbook.",
        [XlsxCellEquals(path=model, sheet="Model", cell=ebitda29.cell, expected=grown.ebitda[4], tol=1e-6),
         numeric(grown.ebitda[4]), FileUnchanged(path=facts.files["comps"])],
        Oracle(steps=[write_cell(growth_cell, new_growth), read_cell(ebitda29, "ebitda")], answer="${ebitda}"),
        [model], [model],
    )  # fmt: skip


def _cut_cogs(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, IbInputs)
    c, model = facts.cells, facts.files["model"]
    cogs_cell = c["cogs_pct_FY2028E"]
    new_cogs = round(inputs.cogs_pct[3] - 0.02, 2)
    cogs_path = [*inputs.cogs_pct[:3], new_cogs, *inputs.cogs_pct[4:]]
    leaner = operating_model(inputs.model_copy(update={"cogs_pct": cogs_path}))
    return TaskDraft(
        Tier.DELIVERABLE,
        f"Procurement savings cut FY2028E COGS to {new_cogs * 100:.0f}% of revenue. Set that assumption on the "
        f"Assumptions sheet of {model} (a fraction, cell {cogs_cell.cell}) and report the new cumulative EBITDA "
        "FY2026E–FY2029E (Model sheet) in USD m. Leave the IC memo untouched.",
        [XlsxCellEquals(path=model, sheet="Model", cell=c["ebitda_FY2028E"].cell, expected=leaner.ebitda[3]),
         XlsxCellEquals(path=model, sheet="Model", cell=c["cumulative_ebitda"].cell,
                        expected=float(f"{sum(leaner.ebitda[1:]):.10g}")),
         numeric(sum(leaner.ebitda[1:])), FileUnchanged(path=facts.files["memo"])],
        Oracle(steps=[write_cell(cogs_cell, new_cogs), read_cell(c["cumulative_ebitda"], "cumulative")],
               answer="${cumulative}"),
        [model], [model],
    )  # fmt: skip


def _revalue_at_new_multiple(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, IbInputs)
    c, model = facts.cells, facts.files["model"]
    new_multiple = round(inputs.multiple + 1.5, 1)
    revalued = inputs.model_copy(update={"multiple": new_multiple})
    new_equity = enterprise_value(revalued, operating_model(revalued)) - inputs.net_debt
    return TaskDraft(
        Tier.DELIVERABLE,
        f"The committee wants to see the valuation at {new_multiple}x EBITDA. Change the multiple on the "
        f"Assumptions sheet of {model} (cell {c['assumed_multiple'].cell}) and report the resulting equity value "
        "(Valuation sheet) in USD m.",
        [XlsxCellEquals(path=model, sheet="Valuation", cell=c["equity_value"].cell,
                        expected=float(f"{new_equity:.10g}")),
         numeric(new_equity), FileUnchanged(path=facts.files["comps"])],
        Oracle(steps=[write_cell(c["assumed_multiple"], new_multiple), read_cell(c["equity_value"], "equity")],
               answer="${equity}"),
        [model], [model],
    )  # fmt: skip


def _valuation_summary(facts: WorldFacts) -> TaskDraft:
    c = facts.cells
    return write_up_task(
        WriteUp.DOCUMENT, "docs/valuation_summary.docx", "Valuation summary",
        [Line("Enterprise value: USD ", c["enterprise_value"], "m"),
         Line("Equity value: USD ", c["equity_value"], "m")],
        facts.files["model"],
    )  # fmt: skip


def _comps_slide(facts: WorldFacts) -> TaskDraft:
    c = facts.cells
    return write_up_task(
        WriteUp.SLIDE, facts.files["deck"], "Comparable companies",
        [Line("Median EV/EBITDA: ", c["comps_median"], "x"), Line("Mean EV/EBITDA: ", c["comps_mean"], "x")],
        facts.files["comps"],
    )  # fmt: skip


def _export_ebitda(facts: WorldFacts) -> TaskDraft:
    model, path = facts.files["model"], "exports/ebitda_by_year.csv"
    rows = [(year, f"e{index}", facts.cells[f"ebitda_{year}"]) for index, year in enumerate(YEARS)]
    return export_task(
        CsvExport(path, "year,ebitda", rows, model),
        f"Export EBITDA per year from the Model sheet of {model} to {path} with the header 'year,ebitda' and "
        "one row per year (FY2025A to FY2029E). Then reply with the sum of the five EBITDA values in USD m.",
        Aggregate.SUM,
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
