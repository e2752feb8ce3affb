"""Corporate-law tasks: SPA, register, budget, mail, calendar and pdf arithmetic (amounts and dates); deliverables
that update the budget or the register, or write an advice note, a slide or a CSV."""

from __future__ import annotations

from datetime import date, timedelta

from envs.taskgen.common import (
    Aggregate,
    CsvExport,
    DomainTasks,
    Line,
    TaskDraft,
    WriteUp,
    answer_for,
    calendar_days,
    days_between,
    export_task,
    inputs_of,
    numeric,
    read_cell,
    read_document,
    read_event,
    read_text_file,
    run_python,
    write_cell,
    write_up_task,
)
from envs.types import FileUnchanged, Oracle, OracleStep, Tier, XlsxCellEquals
from envs.worlds import WorldFacts
from envs.worlds.facts import LawInputs
from envs.worlds.law import PHASES, matter_budget, register_summary

EXPORTED_CONTRACTS = 5
PRICE_PATTERN = r"purchase price for the shares is USD ([\d.]+)m"

# --- standard: one answer computed from values in two or more places -------------------------------------------------


def _share_of_price(facts: WorldFacts, prompt: str, pct_key: str, pct_pattern: str, save_as: str) -> TaskDraft:
    """A percentage of the SPA's purchase price (USD m): both numbers read from the SPA."""
    spa, t = facts.files["spa"], facts.texts
    return TaskDraft(
        Tier.STANDARD,
        prompt.format(spa=spa),
        [numeric(float(t["price"].value) * float(t[pct_key].value) / 100)],
        Oracle(
            steps=[read_document(spa, "price", PRICE_PATTERN), read_document(spa, save_as, pct_pattern),
                   run_python(f"print(round(${{price}} * ${{{save_as}}} / 100, 4))")],
            answer="${result}",
        ),
        [spa],
    )  # fmt: skip


def _escrow_amount(facts: WorldFacts) -> TaskDraft:
    prompt = "Under the share purchase agreement ({spa}), how much of the purchase price (USD m) is paid into escrow?"
    pattern = r"([\d.]+)% of the purchase price is paid into escrow"
    return _share_of_price(facts, prompt, "escrow_pct", pattern, "escrow")


def _warranty_cap(facts: WorldFacts) -> TaskDraft:
    prompt = "What is the Sellers' maximum aggregate warranty liability in USD m under {spa}?"
    return _share_of_price(facts, prompt, "cap_pct", r"capped at ([\d.]+)% of the\s+purchase price", "cap")


def _days_from_signing_to_long_stop(facts: WorldFacts) -> TaskDraft:
    spa, signing = facts.files["spa"], facts.event("signing").start[:10]
    return TaskDraft(
        Tier.STANDARD,
        f"How many days are there from the signing meeting in the calendar to the long-stop date in {spa}?",
        [numeric(calendar_days(signing, facts.texts["long_stop"].value))],
        Oracle(
            steps=[
                OracleStep(tool="calendar.search_events", args={"query": "signing"}, save_as="event",
                           extract=r"^(e\d+) \| .* \| Signing$"),
                read_event("${event}", "start", "start"),
                read_document(spa, "long_stop", r"completion has not occurred by (\d{4}-\d{2}-\d{2})"),
                days_between("start", "long_stop"),
            ],
            answer="${result}",
        ),
        [spa],
    )  # fmt: skip


def _coc_value_share(facts: WorldFacts) -> TaskDraft:
    c, register = facts.cells, facts.files["register"]
    return TaskDraft(
        Tier.STANDARD,
        f"What percentage of the total annual contract value in {register} (Summary sheet) sits in contracts with "
        "change-of-control clauses?",
        [numeric(c["coc_value"].value / c["total_value"].value * 100)],
        Oracle(
            steps=[read_cell(c["coc_value"], "coc"), read_cell(c["total_value"], "total"),
                   run_python("print(round(${coc} / ${total} * 100, 4))")],
            answer="${result}",
        ),
        [register],
    )  # fmt: skip


def _fee_cap_headroom(facts: WorldFacts) -> TaskDraft:
    budget, with_contingency = facts.files["budget"], facts.cells["budget_with_contingency"]
    return TaskDraft(
        Tier.STANDARD,
        "The client's general counsel emailed the fee cap their board approved. How much headroom (USD) is left "
        f"under it after the total budget with contingency in {budget} (Budget sheet)?",
        [numeric(float(facts.texts["fee_cap"].value) - with_contingency.value)],
        Oracle(
            steps=[
                OracleStep(tool="mail.search_messages", args={"query": "fee cap"}, save_as="message",
                           extract=r"^(m\d+) \|"),
                OracleStep(tool="mail.read_message", args={"message_id": "${message}"}, save_as="cap",
                           extract=r"fee cap of USD ([\d,]+)"),
                read_cell(with_contingency, "budget"),
                run_python("print(round(float('${cap}'.replace(',', '')) - ${budget}, 2))"),
            ],
            answer="${result}",
        ),
        [budget],
    )  # fmt: skip


def _earliest_termination(facts: WorldFacts) -> TaskDraft:
    report = facts.files["report"]
    earliest = date.fromisoformat(facts.texts["signing_date"].value) + timedelta(days=int(facts.pdf.wrapped_value))
    return TaskDraft(
        Tier.STANDARD,
        f"The due diligence report ({report}) gives the notice period after a change of control for one "
        "agreement. If the counterparty served notice on the signing date (reference/signing_date.txt), on which "
        "date (YYYY-MM-DD) could the agreement end at the earliest?",
        [answer_for(earliest.isoformat())],
        Oracle(
            steps=[
                OracleStep(tool="pdf.read_pdf", args={"path": report, "pages": "2"}, save_as="days",
                           extract=r"on\s+(\d+)\s+days'\s+written\s+notice"),
                read_text_file("reference/signing_date.txt", "signing"),
                run_python("from datetime import date, timedelta\n"
                           "print(date.fromisoformat('${signing}') + timedelta(days=${days}))"),
            ],
            answer="${result}",
        ),
        [report, "reference/signing_date.txt"],
    )  # fmt: skip


def _first_phase_share(facts: WorldFacts) -> TaskDraft:
    c, budget = facts.cells, facts.files["budget"]
    return TaskDraft(
        Tier.STANDARD,
        f"What share of the total budget (before contingency) in {budget} does the {PHASES[0]} phase take, in "
        "percent?",
        [numeric(c[f"cost_{PHASES[0]}"].value / c["budget_total"].value * 100)],
        Oracle(
            steps=[read_cell(c[f"cost_{PHASES[0]}"], "phase"), read_cell(c["budget_total"], "total"),
                   run_python("print(round(${phase} / ${total} * 100, 4))")],
            answer="${result}",
        ),
        [budget],
    )  # fmt: skip


def _largest_contract_share(facts: WorldFacts) -> TaskDraft:
    c, register = facts.cells, facts.files["register"]
    return TaskDraft(
        Tier.STANDARD,
        f"The largest contract in {register} is what percentage of the total annual contract value (Summary "
        "sheet)?",
        [numeric(c["largest_value"].value / c["total_value"].value * 100)],
        Oracle(
            steps=[read_cell(c["largest_value"], "largest"), read_cell(c["total_value"], "total"),
                   run_python("print(round(${largest} / ${total} * 100, 4))")],
            answer="${result}",
        ),
        [register],
    )  # fmt: skip


# --- deliverables: update the budget or the register, write a note or a slide, export a CSV -------------------------


def _raise_partner_rate(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, LawInputs)
    c, budget = facts.cells, facts.files["budget"]
    partner_rate = inputs.rates[0][1] + 75
    repriced = matter_budget(inputs.model_copy(update={"rates": [("Partner", partner_rate), *inputs.rates[1:]]}))
    return TaskDraft(
        Tier.DELIVERABLE,
        f"The Partner hourly rate rises to USD {partner_rate:.0f}. Update it in {budget} (Rates sheet, cell "
        f"{c['rate_Partner'].cell}) and report the new total budget with contingency (Budget sheet) in USD. "
        "Do not touch the contract register.",
        [XlsxCellEquals(path=budget, sheet="Budget", cell=c["budget_with_contingency"].cell,
                        expected=repriced.with_contingency),
         numeric(repriced.with_contingency), FileUnchanged(path=facts.files["register"])],
        Oracle(
            steps=[write_cell(c["rate_Partner"], partner_rate), read_cell(c["budget_with_contingency"], "total")],
            answer="${total}",
        ),
        [budget], [budget],
    )  # fmt: skip


def _add_partner_hours(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, LawInputs)
    c, budget = facts.cells, facts.files["budget"]
    phase, hours = inputs.phases[1]
    new_hours = hours[0] + 20
    longer = matter_budget(
        inputs.model_copy(update={"phases": [inputs.phases[0], (phase, [new_hours, *hours[1:]]), *inputs.phases[2:]]})
    )
    return TaskDraft(
        Tier.DELIVERABLE,
        f"{phase} needs {new_hours:.0f} Partner hours. Update the Budget sheet of {budget} (cell "
        f"{c[f'hours_{phase}_Partner'].cell}) and report the new total budget before contingency in USD.",
        [XlsxCellEquals(path=budget, sheet="Budget", cell=c["budget_total"].cell, expected=longer.total),
         numeric(longer.total), FileUnchanged(path=facts.files["spa"])],
        Oracle(steps=[write_cell(c[f"hours_{phase}_Partner"], new_hours), read_cell(c["budget_total"], "total")],
               answer="${total}"),
        [budget], [budget],
    )  # fmt: skip


def _expire_contract(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, LawInputs)
    c, register = facts.cells, facts.files["register"]
    active_id = next((row[0] for row in inputs.contracts if row[6] == "Active"), inputs.contracts[0][0])
    expired = [(*row[:6], "Expired", row[7]) if row[0] == active_id else row for row in inputs.contracts]
    new_register = register_summary(inputs.model_copy(update={"contracts": expired}))
    return TaskDraft(
        Tier.DELIVERABLE,
        f"Contract {active_id} has been terminated. Mark its status as Expired on the Contracts sheet of "
        f"{register} (cell {c[f'status_{active_id}'].cell}) and report how many contracts are now active "
        "(Summary sheet).",
        [XlsxCellEquals(path=register, sheet="Summary", cell=c["active_count"].cell, expected=new_register.active),
         numeric(new_register.active), FileUnchanged(path=facts.files["budget"])],
        Oracle(steps=[write_cell(c[f"status_{active_id}"], "Expired"), read_cell(c["active_count"], "active")],
               answer="${active}"),
        [register], [register],
    )  # fmt: skip


def _coc_note(facts: WorldFacts) -> TaskDraft:
    c = facts.cells
    return write_up_task(
        WriteUp.DOCUMENT, "docs/coc_note.docx", "Change-of-control contracts",
        [Line("Contracts with change-of-control clauses: ", c["coc_count"]),
         Line("Their annual value: USD ", c["coc_value"], "k")],
        facts.files["register"],
    )  # fmt: skip


def _register_slide(facts: WorldFacts) -> TaskDraft:
    c = facts.cells
    return write_up_task(
        WriteUp.SLIDE, facts.files["deck"], "Contract register",
        [Line("Total annual value: USD ", c["total_value"], "k"), Line("Active contracts: ", c["active_count"])],
        facts.files["register"],
    )  # fmt: skip


def _export_contract_values(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, LawInputs)
    register, path = facts.files["register"], "exports/contract_values.csv"
    exported = [row[0] for row in inputs.contracts[:EXPORTED_CONTRACTS]]
    rows = [(cid, f"v{index}", facts.cells[f"value_{cid}"]) for index, cid in enumerate(exported)]
    return export_task(
        CsvExport(path, "id,annual_value_usd_k", rows, register),
        f"Export the annual values of contracts {', '.join(exported)} from the Contracts sheet of {register} to "
        f"{path} with the header 'id,annual_value_usd_k'. Then reply with their sum in USD k.",
        Aggregate.SUM,
    )


tasks = DomainTasks(
    standard=(
        _escrow_amount,
        _warranty_cap,
        _days_from_signing_to_long_stop,
        _coc_value_share,
        _fee_cap_headroom,
        _earliest_termination,
        _first_phase_share,
        _largest_contract_share,
    ),
    deliverable=(
        _raise_partner_rate,
        _add_partner_hours,
        _expire_contract,
        _coc_note,
        _register_slide,
        _export_contract_values,
    ),
)
