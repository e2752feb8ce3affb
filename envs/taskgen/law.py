"""Corporate-law tasks: SPA, register, budget, mail, calendar and pdf arithmetic (amounts and dates); deliverables
that update the budget or the register, or write an advice note, a slide or a CSV."""

from __future__ import annotations

from datetime import date, timedelta

from envs.taskgen.common import (
    Line,
    TaskDraft,
    WriteUp,
    answer_for,
    days_between,
    numeric,
    read_cell,
    read_document,
    read_event,
    read_text_file,
    run_python,
    toy_tasks,
    write_cell,
    write_up_task,
)
from envs.types import FileExists, FileUnchanged, Oracle, OracleStep, Tier, XlsxCellEquals
from envs.worlds import WorldFacts
from envs.worlds.facts import LawInputs
from envs.worlds.law import PHASES, matter_budget, register_summary

EXPORTED_CONTRACTS = 5


def tasks(facts: WorldFacts) -> list[TaskDraft]:
    return toy_tasks(facts) + standard_tasks(facts) + deliverable_tasks(facts)


def _inputs(facts: WorldFacts) -> LawInputs:
    if not isinstance(facts.inputs, LawInputs):
        raise TypeError(f"{facts.world_id} is not a corporate-law world")
    return facts.inputs


def standard_tasks(facts: WorldFacts) -> list[TaskDraft]:
    c, t, f = facts.cells, facts.texts, facts.files
    spa, register, budget, report = f["spa"], f["register"], f["budget"], f["report"]
    price = float(t["price"].value)
    signing = facts.event("signing").start[:10]
    earliest = date.fromisoformat(t["signing_date"].value) + timedelta(days=int(facts.pdf.wrapped_value))
    return [
        TaskDraft(
            Tier.STANDARD,
            f"Under the share purchase agreement ({spa}), how much of the purchase price (USD m) is paid into escrow?",
            [numeric(price * float(t["escrow_pct"].value) / 100)],
            Oracle(
                steps=[read_document(spa, "price", r"purchase price for the shares is USD ([\d.]+)m"),
                       read_document(spa, "escrow", r"([\d.]+)% of the purchase price is paid into escrow"),
                       run_python("print(round(${price} * ${escrow} / 100, 4))")],
                answer="${result}",
            ),
            [spa],
        ),
        TaskDraft(
            Tier.STANDARD,
            f"What is the Sellers' maximum aggregate warranty liability in USD m under {spa}?",
            [numeric(price * float(t["cap_pct"].value) / 100)],
            Oracle(
                steps=[read_document(spa, "price", r"purchase price for the shares is USD ([\d.]+)m"),
                       read_document(spa, "cap", r"capped at ([\d.]+)% of the\s+purchase price"),
                       run_python("print(round(${price} * ${cap} / 100, 4))")],
                answer="${result}",
            ),
            [spa],
        ),
        TaskDraft(
            Tier.STANDARD,
            f"How many days are there from the signing meeting in the calendar to the long-stop date in {spa}?",
            [numeric((date.fromisoformat(t["long_stop"].value) - date.fromisoformat(signing)).days)],
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
        ),
        TaskDraft(
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
        ),
        TaskDraft(
            Tier.STANDARD,
            "The client's general counsel emailed the fee cap their board approved. How much headroom (USD) is left "
            f"under it after the total budget with contingency in {budget} (Budget sheet)?",
            [numeric(float(t["fee_cap"].value) - c["budget_with_contingency"].value)],
            Oracle(
                steps=[
                    OracleStep(tool="mail.search_messages", args={"query": "fee cap"}, save_as="message",
                               extract=r"^(m\d+) \|"),
                    OracleStep(tool="mail.read_message", args={"message_id": "${message}"}, save_as="cap",
                               extract=r"fee cap of USD ([\d,]+)"),
                    read_cell(c["budget_with_contingency"], "budget"),
                    run_python("print(round(float('${cap}'.replace(',', '')) - ${budget}, 2))"),
                ],
                answer="${result}",
            ),
            [budget],
        ),
        TaskDraft(
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
        ),
        TaskDraft(
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
        ),
        TaskDraft(
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
        ),
    ]  # fmt: skip


def deliverable_tasks(facts: WorldFacts) -> list[TaskDraft]:
    inputs = _inputs(facts)
    c, f = facts.cells, facts.files
    register, budget, deck = f["register"], f["budget"], f["deck"]
    partner_rate = inputs.rates[0][1] + 75
    repriced = matter_budget(inputs.model_copy(update={"rates": [("Partner", partner_rate), *inputs.rates[1:]]}))
    phase, hours = inputs.phases[1]
    new_hours = hours[0] + 20
    longer = matter_budget(
        inputs.model_copy(update={"phases": [inputs.phases[0], (phase, [new_hours, *hours[1:]]), *inputs.phases[2:]]})
    )
    active_id = next((row[0] for row in inputs.contracts if row[6] == "Active"), inputs.contracts[0][0])
    expired = [(*row[:6], "Expired", row[7]) if row[0] == active_id else row for row in inputs.contracts]
    new_register = register_summary(inputs.model_copy(update={"contracts": expired}))
    note, export = "docs/coc_note.docx", "exports/contract_values.csv"
    exported = [row[0] for row in inputs.contracts[:EXPORTED_CONTRACTS]]
    return [
        TaskDraft(
            Tier.DELIVERABLE,
            f"The Partner hourly rate rises to USD {partner_rate:.0f}. Update it in {budget} (Rates sheet, cell "
            f"{c['rate_Partner'].cell}) and report the new total budget with contingency (Budget sheet) in USD. "
            "Do not touch the contract register.",
            [XlsxCellEquals(path=budget, sheet="Budget", cell=c["budget_with_contingency"].cell,
                            expected=repriced.with_contingency),
             numeric(repriced.with_contingency), FileUnchanged(path=register)],
            Oracle(
                steps=[write_cell(c["rate_Partner"], partner_rate), read_cell(c["budget_with_contingency"], "total")],
                answer="${total}",
            ),
            [budget], [budget],
        ),
        TaskDraft(
            Tier.DELIVERABLE,
            f"{phase} needs {new_hours:.0f} Partner hours. Update the Budget sheet of {budget} (cell "
            f"{c[f'hours_{phase}_Partner'].cell}) and report the new total budget before contingency in USD.",
            [XlsxCellEquals(path=budget, sheet="Budget", cell=c["budget_total"].cell, expected=longer.total),
             numeric(longer.total), FileUnchanged(path=f["spa"])],
            Oracle(steps=[write_cell(c[f"hours_{phase}_Partner"], new_hours), read_cell(c["budget_total"], "total")],
                   answer="${total}"),
            [budget], [budget],
        ),
        TaskDraft(
            Tier.DELIVERABLE,
            f"Contract {active_id} has been terminated. Mark its status as Expired on the Contracts sheet of "
            f"{register} (cell {c[f'status_{active_id}'].cell}) and report how many contracts are now active "
            "(Summary sheet).",
            [XlsxCellEquals(path=register, sheet="Summary", cell=c["active_count"].cell, expected=new_register.active),
             numeric(new_register.active), FileUnchanged(path=budget)],
            Oracle(steps=[write_cell(c[f"status_{active_id}"], "Expired"), read_cell(c["active_count"], "active")],
                   answer="${active}"),
            [register], [register],
        ),
        write_up_task(
            WriteUp.DOCUMENT, note, "Change-of-control contracts",
            [Line("Contracts with change-of-control clauses: ", c["coc_count"]),
             Line("Their annual value: USD ", c["coc_value"], "k")],
            register,
        ),
        write_up_task(
            WriteUp.SLIDE, deck, "Contract register",
            [Line("Total annual value: USD ", c["total_value"], "k"), Line("Active contracts: ", c["active_count"])],
            register,
        ),
        TaskDraft(
            Tier.DELIVERABLE,
            f"Export the annual values of contracts {', '.join(exported)} from the Contracts sheet of {register} to "
            f"{export} with the header 'id,annual_value_usd_k'. Then reply with their sum in USD k.",
            [FileExists(path=export), numeric(sum(c[f"value_{cid}"].value for cid in exported)),
             FileUnchanged(path=register)],
            Oracle(
                steps=[
                    *[read_cell(c[f"value_{cid}"], f"v{index}") for index, cid in enumerate(exported)],
                    OracleStep(tool="filesystem.write_file",
                               args={"path": export, "content": "id,annual_value_usd_k\n" + "".join(
                                   f"{cid},${{v{index}}}\n" for index, cid in enumerate(exported))}),
                    run_python("print(round(" + " + ".join(f"${{v{i}}}" for i in range(len(exported))) + ", 2))"),
                ],
                answer="${result}",
            ),
            [register], [export],
        ),
    ]  # fmt: skip
