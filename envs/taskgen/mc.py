"""Management-consulting tasks: survey and sizing arithmetic across the workbooks, statement of work, chat,
calendar and pdf; deliverables that change sizing inputs or correct survey data, or write a memo, slide or CSV."""

from __future__ import annotations

from datetime import date

from envs.taskgen.common import (
    Line,
    TaskDraft,
    WriteUp,
    days_between,
    numeric,
    read_cell,
    read_document,
    read_event,
    read_text_file,
    run_python,
    table_row_change,
    toy_tasks,
    write_cell,
    write_up_task,
)
from envs.types import FileExists, FileUnchanged, Oracle, OracleStep, Tier, XlsxCellEquals
from envs.worlds import WorldFacts
from envs.worlds.facts import McInputs
from envs.worlds.mc import REGIONS, market_sizing, survey_summary


def tasks(facts: WorldFacts) -> list[TaskDraft]:
    return toy_tasks(facts) + standard_tasks(facts) + deliverable_tasks(facts)


def _inputs(facts: WorldFacts) -> McInputs:
    if not isinstance(facts.inputs, McInputs):
        raise TypeError(f"{facts.world_id} is not a management-consulting world")
    return facts.inputs


def standard_tasks(facts: WorldFacts) -> list[TaskDraft]:
    c, t, f = facts.cells, facts.texts, facts.files
    survey, sizing, sow, report = f["survey"], f["sizing"], f["sow"], f["report"]
    gain = float(t["share_gain"].value)
    fees = float(t["weekly_fee"].value) * float(t["weeks"].value)
    fieldwork = t["fieldwork_end"].value
    steerco = facts.event("steerco").start[:10]
    return [
        TaskDraft(
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
        ),
        TaskDraft(
            Tier.STANDARD,
            f"Under the statement of work ({sow}), what is the total cost of the engagement in USD k, including "
            "expenses?",
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
        ),
        TaskDraft(
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
        ),
        TaskDraft(
            Tier.STANDARD,
            f"The market study ({report}) reports the share of premium shoppers who switched retailer in the past "
            f"year. Applied to the number of Premium respondents in {survey} (Summary sheet), how many respondents "
            "is that?",
            [numeric(float(facts.pdf.wrapped_value) / 100 * c["responses_Premium"].value)],
            Oracle(
                steps=[
                    OracleStep(tool="pdf.read_pdf", args={"path": report, "pages": "2"}, save_as="share",
                               extract=r"rose\s+to\s+(\d+)\s+percent"),
                    read_cell(c["responses_Premium"], "premium"),
                    run_python("print(round(${share} / 100 * ${premium}, 3))"),
                ],
                answer="${result}",
            ),
            [report, survey],
        ),
        TaskDraft(
            Tier.STANDARD,
            "How many days after the end of survey fieldwork (reference/survey_fieldwork_end.txt) is the steering "
            "committee meeting in the calendar?",
            [numeric((date.fromisoformat(steerco) - date.fromisoformat(fieldwork)).days)],
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
        ),
        TaskDraft(
            Tier.STANDARD,
            f"According to the market-size table on page 3 of {report}, by how much (USD m) does the TAM grow from "
            "2026 to 2029E?",
            [numeric(c["tam_2029E"].value - c["tam_2026"].value)],
            Oracle(
                steps=table_row_change(report, 3, "TAM"),
                answer="${result}",
            ),
            [report],
        ),
        TaskDraft(
            Tier.STANDARD,
            f"What percentage of survey respondents in {survey} are promoters (Summary sheet)?",
            [numeric(c["promoters"].value / c["responses"].value * 100)],
            Oracle(
                steps=[read_cell(c["promoters"], "promoters"), read_cell(c["responses"], "responses"),
                       run_python("print(round(${promoters} / ${responses} * 100, 4))")],
                answer="${result}",
            ),
            [survey],
        ),
        TaskDraft(
            Tier.STANDARD,
            f"Divide the client's premium revenue (SOM, Sizing sheet of {sizing}) by its store count "
            "(reference/client_store_count.txt). What is the premium revenue per store in USD k?",
            [numeric(c["som"].value * 1000 / float(t["store_count"].value))],
            Oracle(
                steps=[read_cell(c["som"], "som"), read_text_file("reference/client_store_count.txt", "stores"),
                       run_python("print(round(${som} * 1000 / ${stores}, 4))")],
                answer="${result}",
            ),
            [sizing, "reference/client_store_count.txt"],
        ),
    ]  # fmt: skip


def deliverable_tasks(facts: WorldFacts) -> list[TaskDraft]:
    inputs = _inputs(facts)
    c, f = facts.cells, facts.files
    survey, sizing, deck = f["survey"], f["sizing"], f["deck"]
    new_share = round(inputs.client_share + 0.04, 2)
    new_sizing = market_sizing(inputs.model_copy(update={"client_share": new_share}))
    new_growth = round(inputs.market_growth + 0.02, 2)
    faster = market_sizing(inputs.model_copy(update={"market_growth": new_growth}))
    respondent = next((r for r in inputs.responses if r[4] <= 6), next(r for r in inputs.responses if r[4] < 9))
    corrected = [(*r[:4], 10, r[5]) if r[0] == respondent[0] else r for r in inputs.responses]
    new_summary = survey_summary(inputs.model_copy(update={"responses": corrected}))
    summary_doc, export = "docs/survey_summary.docx", "exports/region_satisfaction.csv"
    region_cells = [c[f"satisfaction_{region}"] for region in REGIONS]
    return [
        TaskDraft(
            Tier.DELIVERABLE,
            f"Set the client's share of the premium segment in {sizing} (Inputs sheet, cell {c['client_share'].cell}) "
            f"to {new_share} and report the resulting client premium revenue (SOM, Sizing sheet) in USD m. Do not "
            "touch the survey workbook.",
            [XlsxCellEquals(path=sizing, sheet="Sizing", cell=c["som"].cell, expected=new_sizing.som),
             numeric(new_sizing.som), FileUnchanged(path=survey)],
            Oracle(steps=[write_cell(c["client_share"], new_share), read_cell(c["som"], "som")], answer="${som}"),
            [sizing], [sizing],
        ),
        TaskDraft(
            Tier.DELIVERABLE,
            f"Raise annual market growth in {sizing} (Inputs sheet, cell {c['market_growth'].cell}) to "
            f"{new_growth} and report the 2029E TAM (Sizing sheet) in USD m.",
            [XlsxCellEquals(path=sizing, sheet="Sizing", cell=c["tam_2029E"].cell, expected=faster.tam_by_year[-1]),
             numeric(faster.tam_by_year[-1]), FileUnchanged(path=f["memo"])],
            Oracle(steps=[write_cell(c["market_growth"], new_growth), read_cell(c["tam_2029E"], "tam")],
                   answer="${tam}"),
            [sizing], [sizing],
        ),
        TaskDraft(
            Tier.DELIVERABLE,
            f"Respondent {respondent[0]}'s likelihood to recommend was keyed in wrongly in {survey}: it should be 10. "
            "Correct it on the Responses sheet and report the updated net promoter score (Summary sheet).",
            [XlsxCellEquals(path=survey, sheet="Summary", cell=c["nps"].cell, expected=new_summary.nps),
             numeric(new_summary.nps), FileUnchanged(path=sizing)],
            Oracle(steps=[write_cell(c[f"recommend_{respondent[0]}"], 10), read_cell(c["nps"], "nps")],
                   answer="${nps}"),
            [survey], [survey],
        ),
        write_up_task(
            WriteUp.DOCUMENT, summary_doc, "Survey summary",
            [Line("Net promoter score: ", c["nps"]),
             Line("Average satisfaction: ", c["avg_satisfaction"], " out of 10")],
            survey,
        ),
        write_up_task(
            WriteUp.SLIDE, deck, "Market size",
            [Line("TAM: USD ", c["tam"], "m"), Line("Premium segment (SAM): USD ", c["sam"], "m")],
            sizing,
        ),
        TaskDraft(
            Tier.DELIVERABLE,
            f"Export average satisfaction per region from the Summary sheet of {survey} to {export} with the header "
            "'region,avg_satisfaction' (North, South, East, West). Then reply with the mean of the four regional "
            "averages.",
            [FileExists(path=export), numeric(sum(cell.value for cell in region_cells) / len(region_cells)),
             FileUnchanged(path=survey)],
            Oracle(
                steps=[
                    *[read_cell(cell, region.lower()) for cell, region in zip(region_cells, REGIONS, strict=True)],
                    OracleStep(tool="filesystem.write_file",
                               args={"path": export, "content": "region,avg_satisfaction\n" + "".join(
                                   f"{region},${{{region.lower()}}}\n" for region in REGIONS)}),
                    run_python("print(round((" + " + ".join(f"${{{r.lower()}}}" for r in REGIONS) + ") / 4, 4))"),
                ],
                answer="${result}",
            ),
            [survey], [export],
        ),
    ]  # fmt: skip
