"""Corporate-law tasks: SPA, register, budget, mail, calendar and pdf arithmetic (amounts and dates); deliverables
that update the budget or the register, or write an advice note, a slide or a CSV."""

from __future__ import annotations

from datetime import date, timedelta

from envs.taskgen import read
from envs.taskgen.common import DomainTasks, PercentageTask, TaskDraft, calendar_days, inputs_of, standard_task
from envs.taskgen.deliverables import Aggregate, ExportTask, Line, WriteUpTask, what_if_task
from envs.taskgen.steps import compute, days_between, run_python
from envs.worlds import WorldFacts
from envs.worlds.facts import LawInputs
from envs.worlds.law import PHASES, contract_id, matter_budget, register_summary

EXPORTED_CONTRACTS = [contract_id(number) for number in range(1, 6)]
"""The register's first five contracts."""
PRICE_PATTERN = r"purchase price for the shares is USD ([\d.]+)m"

# --- standard: one answer computed from values in two or more places -------------------------------------------------


def _share_of_price(facts: WorldFacts, prompt: str, pct_key: str, pct_pattern: str, save_as: str) -> TaskDraft:
    """A percentage of the SPA's purchase price (USD m): both numbers read from the SPA."""
    spa, t = facts.files["spa"], facts.texts
    return standard_task(
        prompt.format(spa=spa),
        float(t["price"].value) * float(t[pct_key].value) / 100,
        [
            read.document(spa, "price", PRICE_PATTERN),
            read.document(spa, save_as, pct_pattern),
            compute(f"${{price}} * ${{{save_as}}} / 100", 4),
        ],
        [spa],
    )


def _escrow_amount(facts: WorldFacts) -> TaskDraft:
    prompt = "Under the share purchase agreement ({spa}), how much of the purchase price (USD m) is paid into escrow?"
    pattern = r"([\d.]+)% of the purchase price is paid into escrow"
    return _share_of_price(facts, prompt, "escrow_pct", pattern, "escrow")


def _warranty_cap(facts: WorldFacts) -> TaskDraft:
    prompt = "What is the Sellers' maximum aggregate warranty liability in USD m under {spa}?"
    return _share_of_price(facts, prompt, "cap_pct", r"capped at ([\d.]+)% of the\s+purchase price", "cap")


def _days_from_signing_to_long_stop(facts: WorldFacts) -> TaskDraft:
    spa, signing = facts.files["spa"], facts.event("signing").start[:10]
    return standard_task(
        f"How many days are there from the signing meeting in the calendar to the long-stop date in {spa}?",
        calendar_days(signing, facts.texts["long_stop"].value),
        [
            *read.event_start("signing", hit=r"^(e\d+) \| .* \| Signing$"),
            read.document(spa, "long_stop", r"completion has not occurred by (\d{4}-\d{2}-\d{2})"),
            days_between("start", "long_stop"),
        ],
        [spa],
    )


def _fee_cap_headroom(facts: WorldFacts) -> TaskDraft:
    budget, with_contingency = facts.files["budget"], facts.cells["budget_with_contingency"]
    return standard_task(
        "The client's general counsel emailed the fee cap their board approved. How much headroom (USD) is left "
        f"under it after the total budget with contingency in {budget} (Budget sheet)?",
        float(facts.texts["fee_cap"].value) - with_contingency.value,
        [
            *read.mail("fee cap", "cap", r"fee cap of USD ([\d,]+)"),
            read.cell(with_contingency, "budget"),
            compute("float('${cap}'.replace(',', '')) - ${budget}", 2),
        ],
        [budget],
    )


def _earliest_termination(facts: WorldFacts) -> TaskDraft:
    report = facts.files["report"]
    earliest = date.fromisoformat(facts.texts["signing_date"].value) + timedelta(days=int(facts.pdf.wrapped_value))
    return standard_task(
        f"The due diligence report ({report}) gives the notice period after a change of control for one "
        "agreement. If the counterparty served notice on the signing date (reference/signing_date.txt), on which "
        "date (YYYY-MM-DD) could the agreement end at the earliest?",
        earliest.isoformat(),
        [
            read.report(facts.pdf, "days", r"on\s+(\d+)\s+days'\s+written\s+notice"),
            read.text_file("reference/signing_date.txt", "signing"),
            run_python(
                "from datetime import date, timedelta\n"
                "print(date.fromisoformat('${signing}') + timedelta(days=${days}))"
            ),
        ],
        [report, "reference/signing_date.txt"],
    )


_coc_value_share = PercentageTask(
    "What percentage of the total annual contract value in {register} (Summary sheet) sits in contracts with "
    "change-of-control clauses?",
    part=("coc", "coc_value"),
    whole=("total", "total_value"),
)
_first_phase_share = PercentageTask(
    f"What share of the total budget (before contingency) in {{budget}} does the {PHASES[0]} phase take, in percent?",
    part=("phase", f"cost_{PHASES[0]}"),
    whole=("total", "budget_total"),
)
_largest_contract_share = PercentageTask(
    "The largest contract in {register} is what percentage of the total annual contract value (Summary sheet)?",
    part=("largest", "largest_value"),
    whole=("total", "total_value"),
)


# --- deliverables: update the budget or the register, write a note or a slide, export a CSV -------------------------


def _raise_partner_rate(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, LawInputs)
    c, budget = facts.cells, facts.files["budget"]
    partner_rate = inputs.rates[0][1] + 75
    repriced = matter_budget(inputs.model_copy(update={"rates": [("Partner", partner_rate), *inputs.rates[1:]]}))
    return what_if_task(
        f"The Partner hourly rate rises to USD {partner_rate:.0f}. Update it in {budget} (Rates sheet, cell "
        f"{c['rate_Partner'].cell}) and report the new total budget with contingency (Budget sheet) in USD. "
        "Do not touch the contract register.",
        (c["rate_Partner"], partner_rate),
        (c["budget_with_contingency"], "total", repriced.with_contingency),
        facts.files["register"],
    )


def _add_partner_hours(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, LawInputs)
    c, budget = facts.cells, facts.files["budget"]
    phase, hours = inputs.phases[1]
    new_hours = hours[0] + 20
    longer = matter_budget(
        inputs.model_copy(update={"phases": [inputs.phases[0], (phase, [new_hours, *hours[1:]]), *inputs.phases[2:]]})
    )
    return what_if_task(
        f"{phase} needs {new_hours:.0f} Partner hours. Update the Budget sheet of {budget} (cell "
        f"{c[f'hours_{phase}_Partner'].cell}) and report the new total budget before contingency in USD.",
        (c[f"hours_{phase}_Partner"], new_hours),
        (c["budget_total"], "total", longer.total),
        facts.files["spa"],
    )


def _expire_contract(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, LawInputs)
    c, register = facts.cells, facts.files["register"]
    active_id = next((row[0] for row in inputs.contracts if row[6] == "Active"), inputs.contracts[0][0])
    expired = [(*row[:6], "Expired", row[7]) if row[0] == active_id else row for row in inputs.contracts]
    return what_if_task(
        f"Contract {active_id} has been terminated. Mark its status as Expired on the Contracts sheet of "
        f"{register} (cell {c[f'status_{active_id}'].cell}) and report how many contracts are now active "
        "(Summary sheet).",
        (c[f"status_{active_id}"], "Expired"),
        (c["active_count"], "active", register_summary(inputs.model_copy(update={"contracts": expired})).active),
        facts.files["budget"],
    )


_coc_note = WriteUpTask(
    "Change-of-control contracts",
    (
        Line("Contracts with change-of-control clauses: ", "coc_count"),
        Line("Their annual value: USD ", "coc_value", "k"),
    ),
    guard="register",
    document="docs/coc_note.docx",
)
_register_slide = WriteUpTask(
    "Contract register",
    (Line("Total annual value: USD ", "total_value", "k"), Line("Active contracts: ", "active_count")),
    guard="register",
)


_export_contract_values = ExportTask(
    f"Export the annual values of contracts {', '.join(EXPORTED_CONTRACTS)} from the Contracts sheet of {{register}} "
    "to {path} with the header 'id,annual_value_usd_k'. Then reply with their sum in USD k.",
    path="exports/contract_values.csv",
    header="id,annual_value_usd_k",
    rows=tuple((cid, f"v{index}", f"value_{cid}") for index, cid in enumerate(EXPORTED_CONTRACTS)),
    source="register",
    aggregate=Aggregate.SUM,
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
