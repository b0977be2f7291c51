"""The claims register: every headline finding of the README links its entry, every registered figure is written in
its finding and equals the table cell it is read from, every other figure of a finding is listed as context (not
measured here) or as untabled, and the page the README links is the register's."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from privbench.report.claims import (
    Figure,
    Finding,
    figure_strings,
    load,
    problem,
    render,
    stale_reports,
    tables,
    unregistered,
)

ROOT = Path(__file__).resolve().parents[1]
REGISTER = load(ROOT / "docs" / "claims.yaml")
STALE = stale_reports(ROOT / "docs" / "claims.yaml")


def _bullets() -> list[str]:
    """The README's headline findings, one bullet each, whitespace collapsed."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Headline findings"):text.index("## The manual")]
    return [" ".join(b.split()) for b in re.split(r"\n(?=- \*\*)", section)[1:]]


def _bullet(finding: Finding) -> str:
    return next(b for b in _bullets() if b.startswith(f"- **{finding.readme}**"))


def test_every_headline_finding_links_its_entry_and_every_entry_is_linked():
    ids = {f.id for f in REGISTER}
    linked = [re.findall(r"\]\(docs/claims\.md#([\w-]+)\)", b) for b in _bullets()]
    assert all(len(found) == 1 and found[0] in ids for found in linked), linked
    assert sorted(found[0] for found in linked) == sorted(ids) and len(ids) == len(REGISTER) >= 17


@pytest.mark.parametrize("finding", REGISTER, ids=lambda f: f.id)
def test_each_figure_is_written_in_its_finding_and_is_its_cell(finding):
    bullet = _bullet(finding)
    assert f"docs/claims.md#{finding.id}" in bullet and finding.figures and finding.command
    for figure in finding.figures:
        assert " ".join(figure.says.split()) in bullet, figure.says
        assert problem(figure, ROOT) is None, problem(figure, ROOT)


@pytest.mark.parametrize("finding", REGISTER, ids=lambda f: f.id)
def test_every_figure_of_a_finding_is_registered_or_context(finding):
    """Each figure-like string of the bullet is in a registered figure, a context string or an untabled one (as often
    as the bullet has it), and each context and untabled string is in the bullet."""
    assert unregistered(finding, _bullet(finding)) == []


def test_figure_strings_are_numbers_with_a_unit_a_decimal_or_an_interval():
    bullet = "2^22 levels, 10^6-10^7, 1,024 bins, seeds 0-4 ([x](docs/claims.md#y-0.5)): 0.514-0.549, 95% t, 3-4 %"
    assert figure_strings(bullet) == ["0.514", "0.549", "95%", "4 %"]
    assert figure_strings("+16.3 dB [-0.1,\n +32.7] over 8.91 MB") == ["+16.3 dB [-0.1, +32.7]", "8.91 MB"]


def test_an_unregistered_figure_or_a_stale_context_string_is_caught():
    finding = next(f for f in REGISTER if f.context and f.figures)
    bullet = _bullet(finding)
    assert unregistered(finding, bullet + " It also gains 9.9 dB [1.0, 2.0].") == [
        "'9.9 dB [1.0, 2.0]' is in no figure, context or untabled string"]
    repeated = figure_strings(finding.context[0])[0]  # held once by its context string, now written twice
    assert unregistered(finding, f"{bullet} and {repeated}") == [
        f"{repeated!r} is in no figure, context or untabled string"]
    stale = dataclasses.replace(finding, context=[*finding.context, "lr 0.123"], untabled=["5 % of 8"])
    assert unregistered(stale, bullet) == ["'lr 0.123' is not in the finding", "'5 % of 8' is not in the finding"]
    near = Finding("a", "A", "cmd", [Figure(says="AUC 0.647 [0.545, 0.749]", table="t", row={}, column="c")])
    assert unregistered(near, "AUC 0.647 [0.545, 0.749] (chance 0.5)") == [
        "'0.5' is in no figure, context or untabled string"]  # not hidden by the digits of 0.545


def test_the_page_lists_each_findings_context_and_untabled_figures():
    figure = Figure(says="1", table="docs/studies/old/table.md", row={}, column="c")
    page = render([Finding("a", "A", "cmd", [figure], context=["lr 0.1", "FPR 1 %"], untabled=["5 % of 8"])])
    assert "Not measured here (settings, papers' own figures): lr 0.1; FPR 1 %." in page
    assert "Measured, but in no committed table (not checked): 5 % of 8." in page
    assert "Not measured" not in render([Finding("a", "A", "cmd", [figure])])


def test_a_figure_that_drifted_from_its_cell_or_a_row_that_is_gone_is_caught():
    figure = REGISTER[0].figures[0]
    drifted = dataclasses.replace(figure, says=f"+{float(figure.says.lstrip('+')) + 0.2:.1f}")
    assert "is not the cell" in str(problem(drifted, ROOT))
    gone = dataclasses.replace(figure, row={**figure.row, "payload": "no_such_payload"})
    assert "0 rows match" in str(problem(gone, ROOT))
    percent = Figure(says="74 % [72, 76]", table="docs/studies/active_server/table.md", column="images recovered",
                     row={"payload": "gradient", "attack.bins": "1024", "fl.batch_size": "32",
                          "victim.num_images": "256"}, scale=100)  # the cell: 0.738 [0.719, 0.758]
    assert problem(percent, ROOT) is None
    assert "is not the cell" in str(problem(dataclasses.replace(percent, says="74 % [71, 76]"), ROOT))


def test_a_span_is_the_lowest_and_highest_of_its_rows():
    span = Figure(says="+14 to +23 dB", table="docs/studies/threat_grid/table.md", column="PSNR gain over chance (dB)",
                  row={"victim.num_images": "1", "victim.update_data": "batch"}, span=True)  # 14 [..] ... 23.1 [..]
    assert problem(span, ROOT) is None
    assert "is not the cell" in str(problem(dataclasses.replace(span, says="+14 to +24 dB"), ROOT))
    one_of = dataclasses.replace(span, says="+22 to +23 dB", row={**span.row, "payload": ["gradient", "update"],
                                                                   "victim.round": "4"})  # 21.8 and 23.1
    assert problem(one_of, ROOT) is None
    assert "one expected" in str(problem(dataclasses.replace(span, span=False), ROOT))


def test_markdown_tables_are_read_by_header():
    text = "intro\n\n| a | b |\n|---|---|\n| x | **0.5 [0.4, 0.6]** |\n| y | 2 |\n\ntext\n| c |\n|---|\n| z |\n"
    assert tables(text) == [[{"a": "x", "b": "**0.5 [0.4, 0.6]**"}, {"a": "y", "b": "2"}], [{"c": "z"}]]


def test_the_claims_page_is_the_register():
    assert (ROOT / "docs" / "claims.md").read_text() == render(REGISTER, STALE) + "\n"


def test_a_finding_read_from_a_stale_report_says_so():
    """Every finding with a figure from a stale report carries the warning, naming the report and what moved; the
    others do not."""
    figure = Figure(says="1", table="docs/studies/old/table.md", row={}, column="c")
    other = dataclasses.replace(figure, table="docs/studies/older_not/table.md")
    page = render([Finding("a", "A", "cmd", [figure]), Finding("b", "B", "cmd", [other])], {"old": "3.1 -> 3.2 dB"})
    a, b = page.split('<a id="b">')
    assert "**Stale table:** `old`'s checked row no longer reproduces on today's code (3.1 -> 3.2 dB)" in a
    assert "Stale" not in b
    marked = (ROOT / "docs" / "claims.md").read_text().count("**Stale table:**")  # 0 while no report is stale
    assert marked == sum(any(g.table.startswith(f"docs/studies/{r}/") for g in f.figures for r in STALE)
                         for f in REGISTER)
