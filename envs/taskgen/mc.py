"""Management-consulting tasks: survey and sizing arithmetic across the workbooks, statement of work, chat,
calendar and pdf; deliverables that change sizing inputs or correct survey data, or write a memo, slide or CSV."""

from __future__ import annotations

from envs.taskgen import read
from envs.taskgen.common import (
    DomainTasks,
    PercentageTask,
    TableChangeTask,
    TaskDraft,
    calendar_days,
    inputs_of,
    standard_task,
)
from envs.taskgen.deliverables import Aggregate, ExportTask, Line, WriteUpTask, what_if_task
from envs.taskgen.steps import compute, days_between
from envs.worlds import WorldFacts
from envs.worlds.facts import McInputs
from envs.worlds.mc import REGIONS, market_sizing, survey_summary

# --- standard: one answer computed from values in two or more places -------------------------------------------------


def _revenue_at_share_ambition(facts: WorldFacts) -> TaskDraft:
    c, sizing = facts.cells, facts.files["sizing"]
    gain = float(facts.texts["share_gain"].value)
    return standard_task(
        "The partner posted in the case-team chat how many percentage points of premium share the client wants "
        f"to gain. If the client's share of the premium segment ({sizing}, Inputs sheet) rises by that much, "
        "what would its premium revenue be, in USD m, on today's premium segment size (Sizing sheet)?",
        c["sam"].value * (c["client_share"].value + gain / 100),
        [
            read.chat("percentage points", "gain", r"gain (\d+) percentage points"),
            read.cell(c["sam"], "sam"),
            read.cell(c["client_share"], "share"),
            compute("${sam} * (${share} + ${gain} / 100)", 4),
        ],
        [sizing],
    )


def _engagement_cost(facts: WorldFacts) -> TaskDraft:
    t, sow = facts.texts, facts.files["sow"]
    fees = float(t["weekly_fee"].value) * float(t["weeks"].value)
    return standard_task(
        f"Under the statement of work ({sow}), what is the total cost of the engagement in USD k, including expenses?",
        fees * (1 + float(t["expenses_pct"].value) / 100),
        [
            read.document(sow, "fee", r"weekly fee of USD (\d+)k"),
            read.document(sow, "weeks", r"for (\d+) weeks"),
            read.document(sow, "expenses", r"billed at (\d+)% of fees"),
            compute("${fee} * ${weeks} * (1 + ${expenses} / 100)", 2),
        ],
        [sow],
    )


def _north_south_gap(facts: WorldFacts) -> TaskDraft:
    c, survey = facts.cells, facts.files["survey"]
    return standard_task(
        f"In {survey} (Summary sheet), by how many points does average satisfaction in the North exceed that in "
        "the South? (Negative if it is lower.)",
        c["satisfaction_North"].value - c["satisfaction_South"].value,
        [
            read.cell(c["satisfaction_North"], "north"),
            read.cell(c["satisfaction_South"], "south"),
            compute("${north} - ${south}", 2),
        ],
        [survey],
    )


def _premium_switchers(facts: WorldFacts) -> TaskDraft:
    premium, survey, report = facts.cells["responses_Premium"], facts.files["survey"], facts.files["report"]
    return standard_task(
        f"The market study ({report}) reports the share of premium shoppers who switched retailer in the past "
        f"year. Applied to the number of Premium respondents in {survey} (Summary sheet), how many respondents "
        "is that?",
        float(facts.pdf.wrapped_value) / 100 * premium.value,
        [
            read.report(facts.pdf, "share", r"rose\s+to\s+(\d+)\s+percent"),
            read.cell(premium, "premium"),
            compute("${share} / 100 * ${premium}", 3),
        ],
        [report, survey],
    )


def _days_from_fieldwork_to_steerco(facts: WorldFacts) -> TaskDraft:
    steerco, fieldwork = facts.event("steerco").start[:10], facts.texts["fieldwork_end"].value
    return standard_task(
        "How many days after the end of survey fieldwork (reference/survey_fieldwork_end.txt) is the steering "
        "committee meeting in the calendar?",
        calendar_days(fieldwork, steerco),
        [
            *read.event_start("steering committee"),
            read.text_file("reference/survey_fieldwork_end.txt", "fieldwork"),
            days_between("fieldwork", "start"),
        ],
        ["reference/survey_fieldwork_end.txt"],
    )


_tam_growth_in_report = TableChangeTask(
    "According to the market-size table on page 3 of {report}, by how much (USD m) does the TAM grow from 2026 to "
    "2029E?",
    row_label="TAM",
    first="tam_2026",
    last="tam_2029E",
)
_promoter_share = PercentageTask(
    "What percentage of survey respondents in {survey} are promoters (Summary sheet)?",
    part=("promoters", "promoters"),
    whole=("responses", "responses"),
)


def _revenue_per_store(facts: WorldFacts) -> TaskDraft:
    som, sizing = facts.cells["som"], facts.files["sizing"]
    return standard_task(
        f"Divide the client's premium revenue (SOM, Sizing sheet of {sizing}) by its store count "
        "(reference/client_store_count.txt). What is the premium revenue per store in USD k?",
        som.value * 1000 / float(facts.texts["store_count"].value),
        [
            read.cell(som, "som"),
            read.text_file("reference/client_store_count.txt", "stores"),
            compute("${som} * 1000 / ${stores}", 4),
        ],
        [sizing, "reference/client_store_count.txt"],
    )


# --- deliverables: change the sizing or the survey, write a summary or a slide, export a CSV -------------------------


def _raise_client_share(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, McInputs)
    c, sizing = facts.cells, facts.files["sizing"]
    new_share = round(inputs.client_share + 0.04, 2)
    return what_if_task(
        f"Set the client's share of the premium segment in {sizing} (Inputs sheet, cell {c['client_share'].cell}) "
        f"to {new_share} and report the resulting client premium revenue (SOM, Sizing sheet) in USD m. Do not "
        "touch the survey workbook.",
        (c["client_share"], new_share),
        (c["som"], "som", market_sizing(inputs.model_copy(update={"client_share": new_share})).som),
        facts.files["survey"],
    )


def _raise_market_growth(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, McInputs)
    c, sizing = facts.cells, facts.files["sizing"]
    new_growth = round(inputs.market_growth + 0.02, 2)
    faster = market_sizing(inputs.model_copy(update={"market_growth": new_growth}))
    return what_if_task(
        f"Raise annual market growth in {sizing} (Inputs sheet, cell {c['market_growth'].cell}) to "
        f"{new_growth} and report the 2029E TAM (Sizing sheet) in USD m.",
        (c["market_growth"], new_growth),
        (c["tam_2029E"], "tam", faster.tam_by_year[-1]),
        facts.files["memo"],
    )


def _correct_recommend_score(facts: WorldFacts) -> TaskDraft:
    inputs = inputs_of(facts, McInputs)
    respondent = next((r for r in inputs.responses if r[4] <= 6), next(r for r in inputs.responses if r[4] < 9))
    corrected = [(*r[:4], 10, r[5]) if r[0] == respondent[0] else r for r in inputs.responses]
    return what_if_task(
        f"Respondent {respondent[0]}'s likelihood to recommend was keyed in wrongly in {facts.files['survey']}: it "
        "should be 10. Correct it on the Responses sheet and report the updated net promoter score (Summary sheet).",
        (facts.cells[f"recommend_{respondent[0]}"], 10),
        (facts.cells["nps"], "nps", survey_summary(inputs.model_copy(update={"responses": corrected})).nps),
        facts.files["sizing"],
    )


_survey_summary_document = WriteUpTask(
    "Survey summary",
    (Line("Net promoter score: ", "nps"), Line("Average satisfaction: ", "avg_satisfaction", " out of 10")),
    guard="survey",
    document="docs/survey_summary.docx",
)
_market_size_slide = WriteUpTask(
    "Market size",
    (Line("TAM: USD ", "tam", "m"), Line("Premium segment (SAM): USD ", "sam", "m")),
    guard="sizing",
)


_export_region_satisfaction = ExportTask(
    "Export average satisfaction per region from the Summary sheet of {survey} to {path} with the header "
    "'region,avg_satisfaction' (North, South, East, West). Then reply with the mean of the four regional averages.",
    path="exports/region_satisfaction.csv",
    header="region,avg_satisfaction",
    rows=tuple((region, region.lower(), f"satisfaction_{region}") for region in REGIONS),
    source="survey",
    aggregate=Aggregate.MEAN,
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
