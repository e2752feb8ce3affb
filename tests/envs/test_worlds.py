"""Worlds: determinism, ground truth that matches the files, cross-document consistency, the two-column pdf trap."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pdfplumber
import pytest

from envs.apps import World, call_tool
from envs.apps.docs import document_text
from envs.apps.sheets import computed_value
from envs.apps.slides import deck_text
from envs.worlds import WORLD_IDS, WorldFacts, generate_world, generate_worlds
from envs.worlds.content import excel_round, near_tie
from envs.worlds.facts import IbInputs, LawInputs, McInputs
from envs.worlds.ib import operating_model
from envs.worlds.law import matter_budget
from envs.worlds.mc import market_sizing

# memo fact -> the model cell whose computed value the memo quotes, per domain
MEMO_QUOTES = {
    "investment_banking": {"memo_revenue": "revenue_FY2026E", "memo_ebitda": "ebitda_FY2026E",
                           "memo_ev": "enterprise_value"},
    "management_consulting": {"memo_nps": "nps", "memo_tam": "tam", "memo_som": "som"},
    "corporate_law": {"memo_total_value": "total_value", "memo_coc_value": "coc_value"},
}  # fmt: skip


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, WorldFacts]]:
    root = tmp_path_factory.mktemp("worlds")
    return root, generate_worlds(root)


def _hashes(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_nine_worlds_with_every_kind_of_file(worlds: tuple[Path, dict[str, WorldFacts]]) -> None:
    root, facts = worlds
    assert sorted(facts) == sorted(WORLD_IDS)
    for world_id in WORLD_IDS:
        suffixes = {path.suffix for path in (root / world_id / "filesystem").rglob("*") if path.is_file()}
        assert {".xlsx", ".docx", ".pdf", ".pptx", ".txt"} <= suffixes, world_id
        for name in ("mail/mailbox.json", "chat/channels.json", "calendar/events.json"):
            assert (root / world_id / "apps_data" / name).is_file()


def test_same_seed_gives_byte_identical_files(worlds: tuple[Path, dict[str, WorldFacts]], tmp_path: Path) -> None:
    root, _ = worlds
    time.sleep(1.1)  # zip entries and core properties would otherwise carry a different wall-clock second
    for world_id in ("ib-1", "mc-2", "law-3"):
        generate_world(world_id, tmp_path / world_id)
        assert _hashes(tmp_path / world_id) == _hashes(root / world_id), world_id


def test_seed_and_world_change_the_content(worlds: tuple[Path, dict[str, WorldFacts]], tmp_path: Path) -> None:
    root, facts = worlds
    other = generate_world("ib-1", tmp_path / "ib-1", seed=1)
    assert other.inputs != facts["ib-1"].inputs
    assert len({facts[w].client for w in ("ib-1", "ib-2", "ib-3")}) == 3
    model = "filesystem/models/operating_model.xlsx"
    assert (root / "ib-1" / model).read_bytes() != (root / "ib-2" / model).read_bytes()


def test_every_formula_fact_equals_the_computed_cell(worlds: tuple[Path, dict[str, WorldFacts]]) -> None:
    root, facts = worlds
    checked = 0
    for world_id, world in facts.items():
        for key, cell in world.cells.items():
            if cell.formula is None:
                continue
            value = computed_value(root / world_id / "filesystem" / cell.path, cell.sheet, cell.cell)
            assert value == pytest.approx(cell.value, rel=1e-9), f"{world_id} {key}"
            checked += 1
    assert checked > 250


def test_workbooks_use_the_required_formulas(worlds: tuple[Path, dict[str, WorldFacts]]) -> None:
    _, facts = worlds
    formulas = " ".join(cell.formula or "" for world in facts.values() for cell in world.cells.values())
    for function in ("MEDIAN(", "AVERAGE(", "COUNTIF(", "SUM(", "ROUND(", "Assumptions!", "Inputs!", "Rates!"):
        assert function in formulas


def test_memos_quote_the_models_computed_cells(worlds: tuple[Path, dict[str, WorldFacts]]) -> None:
    root, facts = worlds
    for world_id, world in facts.items():
        for memo_key, cell_key in MEMO_QUOTES[world.domain].items():
            quote, cell = world.texts[memo_key], world.cells[cell_key]
            assert quote.value in document_text(root / world_id / "filesystem" / quote.source), (world_id, memo_key)
            computed = computed_value(root / world_id / "filesystem" / cell.path, cell.sheet, cell.cell)
            assert float(quote.value) == pytest.approx(computed, rel=1e-12), (world_id, memo_key)


def test_pdf_table_figures_equal_the_sheet(worlds: tuple[Path, dict[str, WorldFacts]]) -> None:
    root, facts = worlds
    for world_id in ("ib-1", "mc-1"):
        world = facts[world_id]
        with pdfplumber.open(root / world_id / "filesystem" / world.pdf.path) as pdf:
            (table,) = pdf.pages[world.pdf.table_page - 1].extract_tables()
        row = next(r for r in table if r[0] in {"EBITDA", "TAM"})
        keys = [f"ebitda_{year}" for year in table[0][1:]] if row[0] == "EBITDA" else [f"tam_{y}" for y in table[0][1:]]
        for text, key in zip(row[1:], keys, strict=True):
            cell = world.cells[key]
            computed = computed_value(root / world_id / "filesystem" / cell.path, cell.sheet, cell.cell)
            assert float(text.replace(",", "")) == pytest.approx(computed), (world_id, key)


def test_two_column_page_traps_a_flattening_reader(worlds: tuple[Path, dict[str, WorldFacts]]) -> None:
    root, facts = worlds
    for world_id, world in facts.items():
        sentence = world.pdf.wrapped_sentence
        with pdfplumber.open(root / world_id / "filesystem" / world.pdf.path) as pdf:
            flat = " ".join(pdf.pages[world.pdf.columns_page - 1].extract_text().split())
        assert sentence not in flat, world_id
        layout = call_tool(World(root / world_id), "pdf.read_pdf", {"path": world.pdf.path, "pages": "2"})
        assert sentence in " ".join(layout.split()), world_id


def test_mail_attachments_are_copies_of_world_files(worlds: tuple[Path, dict[str, WorldFacts]]) -> None:
    root, facts = worlds
    for world_id, world in facts.items():
        mailbox = json.loads((root / world_id / "apps_data/mail/mailbox.json").read_text())
        by_name = {Path(path).name: path for path in world.files.values()}
        attached = 0
        for message in mailbox["messages"]:
            assert set(message) == {"id", "folder", "thread_id", "from", "to", "cc", "date", "subject", "body",
                                    "attachments"}  # fmt: skip
            for name in message["attachments"]:
                copy = root / world_id / "apps_data/mail/attachments" / message["id"] / name
                assert copy.read_bytes() == (root / world_id / "filesystem" / by_name[name]).read_bytes()
                attached += 1
        assert attached >= 4
        assert any(m["subject"].startswith("RE:") for m in mailbox["messages"]), "a thread with a reply"


def test_text_facts_from_apps_point_at_the_right_records(worlds: tuple[Path, dict[str, WorldFacts]]) -> None:
    root, facts = worlds
    world = World(root / "ib-2")
    net_debt = facts["ib-2"].texts["mail_net_debt"]
    assert net_debt.source == f"mail:{facts['ib-2'].message('net_debt').id}"
    message = call_tool(world, "mail.read_message", {"message_id": net_debt.source.split(":")[1]})
    assert f"USD {net_debt.value}m" in message
    premium = facts["ib-2"].texts["control_premium"]
    channel, chat_id = premium.source.split(":")[1:]
    assert f"{premium.value}% control premium" in call_tool(world, "chat.read_channel", {"channel": channel})
    assert chat_id == facts["ib-2"].chat("premium").id


def test_decks_hold_titles_bullets_and_a_table(worlds: tuple[Path, dict[str, WorldFacts]]) -> None:
    root, facts = worlds
    world = facts["law-1"]
    text = deck_text(root / "law-1" / "filesystem" / world.files["deck"])
    assert f"{world.project} — client briefing" in text
    assert "Matter budget" in text and "Signing and closing" in text


def test_bad_world_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bad world id 'hr-1'"):
        generate_world("hr-1", tmp_path / "hr-1")


def test_excel_round_is_half_up_on_the_decimal_text() -> None:
    assert excel_round(2.675, 2) == 2.68  # Python's round(2.675, 2) gives 2.67 (binary 2.67499...)
    assert excel_round(-1.25, 1) == -1.3
    assert near_tie(7.125, 2) and not near_tie(7.12, 2)


def test_domain_formulas_on_hand_computed_inputs() -> None:
    ib = IbInputs(years=["A", "B"], base_revenue=100.0, growth=[0.1], cogs_pct=[0.6, 0.55], opex_pct=0.15,
                  tax_rate=0.25, comps=[("X", 100.0, 10.0)], multiple=10.0, net_debt=5.0)  # fmt: skip
    model = operating_model(ib)
    # revenue 100 -> 110; COGS 60, 60.5; opex 15, 16.5; EBITDA 25, 33; taxes 6.3 (6.25 rounds up), 8.3 (8.25)
    assert model.revenue == [100.0, 110.0]
    assert model.ebitda == [25.0, 33.0]
    assert model.taxes == [6.3, 8.3]
    mc = McInputs(households_m=10.0, category_share=0.2, annual_spend=500.0, premium_share=0.3, client_share=0.1,
                  market_growth=0.05, responses=[("R001", "North", "Value", 7, 9, 30.0)])  # fmt: skip
    sizing = market_sizing(mc)
    assert (sizing.tam, sizing.sam, sizing.som) == (1000.0, 300.0, 30.0)  # 10m x 20% x USD 500
    assert sizing.tam_by_year[1] == 1050.0
    law = LawInputs(contracts=[], rates=[("Partner", 1000.0), ("Associate", 500.0)],
                    phases=[("DD", [2.0, 4.0]), ("SPA", [1.0, 0.0])], contingency=0.1)  # fmt: skip
    budget = matter_budget(law)
    assert budget.phase_costs == [4000.0, 1000.0]
    assert budget.with_contingency == 5500.0
