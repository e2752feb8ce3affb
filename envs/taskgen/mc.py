"""Management-consulting tasks: survey and sizing arithmetic across the workbooks, statement of work, chat,
calendar and pdf; deliverables that change sizing inputs or correct survey data, or write a memo, slide or CSV."""

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
    read_text_file,
    run_python,
    table_row_change,
    write_cell,
    write_up_task,
)
from envs.types import FileUnchanged, Oracle, OracleStep, Tier, XlsxCellEquals
from envs.worlds import WorldFacts
from envs.worlds.facts import McInputs
from envs.worlds.mc import REGIONS, market_sizing, survey_summary

# --- standard: one answer computed from values in two or more places -------------------------------------------------


def _revenue_at_share_ambition(facts: WorldFacts) -> TaskDraft:
    c, sizing = facts.cells, facts.files["sizing"]
    gain = float(facts.texts["share_gain"].value)
    return TaskDraft(
        Tier.STANDARD,
        "The partner posted in the case-team chat how many percentage points of premium share the client wants "
        f"to gain. If the client's share of the premium segment ({sizing}, Inputs sheet) rises by that much, "
        "what would its premium revenue be, in USD m, on today's premium segment size (Sizing sheet)?",
        [numeric(c["sam"].value * (c["client_share"].value + gain / 100))],
        Oracle(
            steps=[
                OracleStep(tool="chat.search_messages", args={"query": "percentage points"}, save_as="gain",
                           extract=r"gain (\d+) percentage points"),
                read_cell(c["sam"], "sam"), read_cell(c["client_share"], "share"),
                run_python("print(round(${sam} * (${share} + ${gain} / 100), 4))"),
            ],
            answer="${result}",
        ),
        [sizing],
    )  # fmt: skip


def _engagement_cost(facts: WorldFacts) -> TaskDraft:
    t, sow = facts.texts, facts.files["sow"]
    fees = float(t["weekly_fee"].value) * float(t["weeks"].value)
    return TaskDraft(
        Tier.STANDARD,
        f"Under the statement of work ({sow}), what is the total cost of the engagement in USD k, including expenses?",
        [numeric(fees * (1 + float(t["expenses_pct"].value) / 100))],
        Oracle(
            steps=[
                read_document(sow, "fee", r"weekly fee of USD (\d+)k"),
                read_document(sow, "weeks", r"for (\d+) weeks"),
                read_document(sow, "expenses", r"billed at (\d+)% of fees"),
                run_python("print(round(${fee} * ${weeks} * (1 + ${expenses} / 100), 2))"),
            ],
            answer="${result}",
        ),
        [sow],
    )


def _north_south_gap(facts: WorldFacts) -> TaskDraft:
    c, survey = facts.cells, facts.files["survey"]
    return TaskDraft(
        Tier.STANDARD,
        f"In {survey} (Summary sheet), by how many points does average satisfaction in the North exceed that in "
        "the South? (Negative if it is lower.)",
        [numeric(c["satisfaction_North"].value - c["satisfaction_South"].value)],
        Oracle(
            steps=[read_cell(c["satisfaction_North"], "north"), read_cell(c["satisfaction_South"], "south"),
                   run_python("print(round(${north} - ${south}, 2))")],
            answer="${result}",
        ),
        [survey],
    )  # fmt: skip


def _premium_switchers(facts: WorldFacts) -> TaskDraft:
    premium, survey, report = facts.cells["responses_Premium"], facts.files["survey"], facts.files["report"]
    return TaskDraft(
        Tier.STANDARD,
        f"The market study ({report}) reports the share of premium shoppers who switched retailer in the past "
        f"year. Applied to the number of Premium respondents in {survey} (Summary sheet), how many respondents "
        "is that?",
        [numeric(float(facts.pdf.wrapped_value) / 100 * premium.value)],
        Oracle(
            steps=[
                OracleStep(tool="pdf.read_pdf", args={"path": report, "pages": "2"}, save_as="share",
                           extract=r"rose\s+to\s+(\d+)\s+percent"),
                read_cell(premium, "premium"),
                run_python("print(round(${share} / 100 * ${premium}, 3))"),
            ],
            answer="${result}",
        ),
        [report, survey],
    )  # fmt: skip


def _days_from_fieldwork_to_steerco(facts: WorldFacts) -> TaskDraft:
    steerco, fieldwork = facts.event("steerco").start[:10], facts.texts["fieldwork_end"].value
    return TaskDraft(
        Tier.STANDARD,
        "How many days after the end of survey fieldwork (reference/survey_fieldwork_end.txt) is the steering "
        "committee meeting in the calendar?",
        [numeric(calendar_days(fieldwork, steerco))],
        Oracle(
            steps=[
                OracleStep(tool="calendar.search_events", args={"query": "steering committee"}, save_as="event",
                           extract=r"^(e\d+) \|"),
                read_event("${event}", "start", "start"),
                read_text_file("reference/survey_fieldwork_end.txt", "fieldwork"),
                days_between("fieldwork", "start"),
            ],
            answer="${result}",
        ),
        ["reference/survey_fieldwork_end.txt"],
    )  # fmt: skip


def _tam_growth_in_report(facts: WorldFacts) -> TaskDraft:
    c, report = facts.cells, facts.files["report"]
    return TaskDraft(
        Tier.STANDARD,
        f"According to the market-size table on page 3 of {report}, by how much (USD m) does the TAM grow from "
        "2026 to 2029E?",
        [numeric(c["tam_2029E"].value - c["tam_2026"].value)],
        Oracle(steps=table_row_change(report, 3, "TAM"), answer="${result}"),
        [report],
    )


def _promoter_share(facts: WorldFacts) -> TaskDraft:
    c, survey = facts.cells, facts.files["survey"]
    return TaskDraft(
        Tier.STANDARD,
        f"What percentage of survey respondents in {survey} are promoters (Summary sheet)?",
        [numeric(c["promoters"].value / c["responses"].value * 100)],
        Oracle(
            steps=[read_cell(c["promoters"], "promoters"), read_cell(c["responses"], "responses"),
                   run_python("print(round(${promoters} / ${responses} * 100, 4))")],
            answer="${result}",
        ),
        [survey],
    )  # fmt: skip


def _revenue_per_store(facts: WorldFacts) -> TaskDraft:
    som, sizing = facts.cells["som"], facts.files["sizing"]
    return TaskDraft(
        Tier.STANDARD,
        f"Divide the client's premium revenue (SOM, Sizing sheet of {sizing}) by its store count "
        "(reference/client_store_count.txt). What is the premium revenue per store in USD k?",
        [numeric(som.value * 1000 / float(facts.texts["store_count"].value))],
        Oracle(
            steps=[read_cell(som, "som"), read_text_file("reference/client_store_count.txt", "stores"),
                   run_python("print(round(${som} * 1000 / ${stores}, 4))")],
            answer="${result}",
        ),
        [sizing, "reference/client_store_count.txt"],
    )  # fmt: skip


# --- deliverables: change the sizing or the survey, write a summary or a slide, export a CSV -------------------------


def _raise_client_share(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, McInputs)
    c, sizing = facts.cells, facts.files["sizing"]
    new_share = round(inputs.client_share + 0.04, 2)
    new_sizing = market_sizing(inputs.model_copy(update={"client_share": new_share}))
    return TaskDraft(
        Tier.DELIVERABLE,
        f"Set the client's share of the premium segment in {sizing} (Inputs sheet, cell {c['client_share'].cell}) "
        f"to {new_share} and report the resulting client premium revenue (SOM, Sizing sheet) in USD m. Do not "
        "touch the survey workbook.",
        [XlsxCellEquals(path=sizing, sheet="Sizing", cell=c["som"].cell, expected=new_sizing.som),
         numeric(new_sizing.som), FileUnchanged(path=facts.files["survey"])],
        Oracle(steps=[write_cell(c["client_share"], new_share), read_cell(c["som"], "som")], answer="${som}"),
        [sizing], [sizing],
    )  # fmt: skip


def _raise_market_growth(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, McInputs)
    c, sizing = facts.cells, facts.files["sizing"]
    new_growth = round(inputs.market_growth + 0.02, 2)
    faster = market_sizing(inputs.model_copy(update={"market_growth": new_growth}))
    return TaskDraft(
        Tier.DELIVERABLE,
        f"Raise annual market growth in {sizing} (Inputs sheet, cell {c['market_growth'].cell}) to "
        f"{new_growth} and report the 2029E TAM (Sizing sheet) in USD m.",
        [XlsxCellEquals(path=sizing, sheet="Sizing", cell=c["tam_2029E"].cell, expected=faster.tam_by_year[-1]),
         numeric(faster.tam_by_year[-1]), FileUnchanged(path=facts.files["memo"])],
        Oracle(steps=[write_cell(c["market_growth"], new_growth), read_cell(c["tam_2029E"], "tam")],
               answer="${tam}"),
        [sizing], [sizing],
    )  # fmt: skip


def _correct_recommend_score(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, McInputs)
    c, survey = facts.cells, facts.files["survey"]
    respondent = next((r for r in inputs.responses if r[4] <= 6), next(r for r in inputs.responses if r[4] < 9))
    corrected = [(*r[:4], 10, r[5]) if r[0] == respondent[0] else r for r in inputs.responses]
    new_summary = survey_summary(inputs.model_copy(update={"responses": corrected}))
    return TaskDraft(
        Tier.DELIVERABLE,
        f"Respondent {respondent[0]}'s likelihood to recommend was keyed in wrongly in {survey}: it should be 10. "
        "Correct it on the Responses sheet and report the updated net promoter score (Summary sheet).",
        [XlsxCellEquals(path=survey, sheet="Summary", cell=c["nps"].cell, expected=new_summary.nps),
         numeric(new_summary.nps), FileUnchanged(path=facts.files["sizing"])],
        Oracle(steps=[write_cell(c[f"recommend_{respondent[0]}"], 10), read_cell(c["nps"], "nps")],
               answer="${nps}"),
        [survey], [survey],
    )  # fmt: skip


def _survey_summary_document(facts: WorldFacts) -> TaskDraft:
    c = facts.cells
    return write_up_task(
        WriteUp.DOCUMENT, "docs/survey_summary.docx", "Survey summary",
        [Line("Net promoter score: ", c["nps"]), Line("Average satisfaction: ", c["avg_satisfaction"], " out of 10")],
        facts.files["survey"],
    )  # fmt: skip


def _market_size_slide(facts: WorldFacts) -> TaskDraft:
    c = facts.cells
    return write_up_task(
        WriteUp.SLIDE, facts.files["deck"], "Market size",
        [Line("TAM: USD ", c["tam"], "m"), Line("Premium segment (SAM): USD ", c["sam"], "m")],
        facts.files["sizing"],
    )  # fmt: skip


def _export_region_satisfaction(facts: WorldFacts) -> TaskDraft:
    survey, path = facts.files["survey"], "exports/region_satisfaction.csv"
    rows = [(region, region.lower(), facts.cells[f"satisfaction_{region}"]) for region in REGIONS]
    return export_task(
        CsvExport(path, "region,avg_satisfaction", rows, survey),
        f"Export average satisfaction per region from the Summary sheet of {survey} to {path} with the header "
        "'region,avg_satisfaction' (North, South, East, West). Then reply with the mean of the four regional "
        "averages.",
        Aggregate.MEAN,
    )


tasks = DomainTasks(
    standard=(
        _revenue_at_share_ambition,
        _engagement_cost,
        _north_south_gap,
        _premium_switchers,
        _days_from_fieldwork_to_steerco,
        _tam_growth_in_report,
        _promoter_share,
        _revenue_per_store,
    ),
    deliverable=(
        _raise_client_share,
        _raise_market_growth,
        _correct_recommend_score,
        _survey_summary_document,
        _market_size_slide,
        _export_region_satisfaction,
    ),
)
