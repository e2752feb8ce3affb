"""Red-team finding 10 (docs/reliability.md): the gate's markdown interpolated details and findings unescaped, and the
Prefect UI rendered an ``<img>`` from a finding and kept a ``javascript:`` link. Rendered by a CommonMark renderer
with raw HTML on (the most permissive a UI could be), a report built from hostile text shows that text and nothing
else: no element, no link, no extra table cell."""

from __future__ import annotations

from markdown_it import MarkdownIt

from flows.config import StageName
from flows.gates import Finding, GateReport, Op, check

HOSTILE = [
    '<img src=x onerror="fetch(`//evil.example`)">',
    "[open the report](javascript:alert(document.cookie))",
    "![x](http://evil.example/pixel.png)",
    "<script>alert(1)</script> | injected cell | `code` **bold**",
    "<https://evil.example> &lt;b&gt;",
]


def test_hostile_text_in_a_gate_report_renders_as_text() -> None:
    criteria = [check(f"tool {text}", 0.5, Op.LE, 0.01, detail=text) for text in HOSTILE]
    findings = [Finding(subject=text, problem=text, advice=text, rate=0.5) for text in HOSTILE]
    report = GateReport.build(StageName.DERISK, criteria, findings=findings)
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(report.markdown())
    assert "<img" not in html and "<script" not in html and "<a " not in html and "href" not in html
    assert html.count("<tr>") == 1 + len(HOSTILE)  # the header and one row per criterion
    assert all(row.count("<td>") == 4 for row in html.split("<tr>")[2:])
    assert html.count("<li>") == 2 * len(HOSTILE)  # each criterion's detail, each finding: one item apiece
    assert "onerror" in html and "document.cookie" in html  # shown, as text


def test_our_own_names_stay_readable() -> None:
    report = GateReport.build(StageName.DERISK, [check("sheets_read_cell failure rate", 0.0, Op.LE, 0.01)])
    assert "| sheets_read_cell failure rate | 0 | <= 0.01 | pass |" in report.markdown()
