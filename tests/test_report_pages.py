"""The report pages in a real headless browser at 1280 px: every image loads, every table fits or scrolls in its box."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from privbench.figures import COMPANIONS
from privbench.report.curves import companion_name
from privbench.report.draw import AUXILIARY
from privbench.report.naming import LIMIT, MAX_SERIES

DOCS = Path(__file__).resolve().parents[1] / "docs" / "studies"
PAGES = sorted(p for pattern in ("*/audit.html", "*/gallery.html") for p in DOCS.glob(pattern))
BROWSERS = ("chromium-headless-shell", "chromium", "google-chrome")
WIDTH = 1280
CHECK = """<script>
window.addEventListener('load', () => {
  const width = window.innerWidth;
  const out = {width: width, page: document.documentElement.scrollWidth, images: 0, broken: [], overflowing: []};
  document.querySelectorAll('img').forEach((img, i) => {
    out.images += 1;
    if (!img.complete || img.naturalWidth === 0) out.broken.push(img.alt || String(i));
  });
  document.querySelectorAll('table').forEach((table, i) => {
    const box = table.parentElement && table.parentElement.classList.contains('scroll') ? table.parentElement : table;
    if (box.getBoundingClientRect().right > width + 0.5) out.overflowing.push(i);
  });
  out.figures = Array.from(document.querySelectorAll('figcaption.figure-text')).map(f => ({
    title: (f.parentElement.querySelector('h3') || {}).textContent || '',
    series: Array.from(f.querySelectorAll('.series')).map(s => s.textContent).join(''),
    axes: Array.from(f.querySelectorAll('.axes')).map(s => s.textContent).join(''),
    key: Array.from(f.querySelectorAll('.key')).map(s => s.textContent).join(''),
    panels: f.dataset.panels || '', kept: f.dataset.kept || '',
    xticks: f.dataset.xticks || ''}));
  const pre = document.createElement('pre');
  pre.id = 'privbench-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _browser() -> str:
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no headless browser: apt-get install chromium-headless-shell (scripts/bootstrap.sh does)")
        pytest.skip("no headless browser (apt-get install chromium-headless-shell)")
    return found


def render(page: Path, tmp_path: Path) -> dict[str, object]:
    """Load ``page`` (with the check script added) at 1280 px and return what the script measured."""
    text = page.read_text()
    assert "</body>" in text, f"{page}: no </body>"
    tmp_path.mkdir(parents=True, exist_ok=True)
    copy = tmp_path / page.name
    copy.write_text(text.replace("</body>", CHECK + "</body>", 1))
    for sibling in page.parent.iterdir():  # pages link to siblings
        if sibling.suffix != ".html" and not (tmp_path / sibling.name).exists():
            (tmp_path / sibling.name).symlink_to(sibling)
    dom = subprocess.run([_browser(), "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={WIDTH},900",
                          "--virtual-time-budget=10000", "--dump-dom", copy.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    start = dom.find('<pre id="privbench-check">')
    assert start >= 0, f"{page}: the check did not run"
    body = dom[start + len('<pre id="privbench-check">'):dom.index("</pre>", start)]
    return json.loads(body.replace("&quot;", '"').replace("&amp;", "&"))


def _assert_readable(page: Path, tmp_path: Path) -> None:
    seen = render(page, tmp_path)
    assert seen["width"] == WIDTH
    assert seen["broken"] == [], f"{page}: broken images {seen['broken']}"
    assert seen["overflowing"] == [], f"{page}: tables wider than the window {seen['overflowing']}"
    assert int(str(seen["page"])) <= WIDTH, f"{page}: the page scrolls sideways ({seen['page']} px)"
    assert int(str(seen["images"])) > 0


def _paged(page: Path) -> object:
    """A gallery (a page of images, 0.3-1.7 s to render) runs with the slow suite; each study's audit page stays quick."""
    return pytest.param(page, marks=pytest.mark.slow) if page.name == "gallery.html" else page


@pytest.mark.parametrize("page", [_paged(p) for p in PAGES], ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_committed_page_renders(page, tmp_path):
    _assert_readable(page, tmp_path)


#: Legend entries that name no setting, so need no key=value.
PLAIN = {*AUXILIARY, "all runs", *(companion_name(what) for _, what in COMPANIONS.values())}
#: A code standing for a setting whose name is too long for a legend; the caption's key spells it out.
CODE = re.compile(r"^S\d+$")
#: Swept keys whose values are whole counts (their axes must not show fractions).
#: (fl.gene.gamma is a count of layers or a fraction, of the layers or of the model: not a count axis.)
COUNTS = ("victim.num_images", "victim.round", "fl.rounds", "data.num_clients")


def figure_faults(figures: list[dict[str, str]]) -> list[str]:
    """What makes a figure hard to decode, from the text the page shows for it: a 'nan', two series of one name,
    a series named without its keys or by an undefined code, fractional ticks on a count axis, more than
    ``MAX_SERIES`` settings in a panel, and a legend entry or setting name over ``LIMIT`` characters. Figures kept
    from an earlier page (drawn from run folders a rebuild lacks) are not checked."""
    faults = []
    for f in figures:
        if f.get("kept"):
            continue
        title, series = f["title"], f["series"].removeprefix("Series: ").removesuffix(".")
        entries = [e for e in series.split("; ") if e]
        panels = json.loads(f["panels"]) if f.get("panels") else []
        defined = {k.split(" = ", 1)[0] for k in f.get("key", "").removeprefix("Key: ").split("; ")}
        text = " ".join([series, f["axes"], f["xticks"]])
        if re.search(r"\bnan\b", text, re.IGNORECASE):
            faults.append(f"{title}: 'nan' in {text!r}")
        if len(entries) != len(set(entries)):
            faults.append(f"{title}: two series share a name")
        for entry in [*entries, *(name for panel in panels for name in panel)]:
            if len(entry) > LIMIT:
                faults.append(f"{title}: a name over {LIMIT} characters: {entry!r}")
            setting = entry.split(", no ")[0].removesuffix(" (sends nothing)")
            if CODE.match(setting):
                if setting not in defined:
                    faults.append(f"{title}: a code the caption does not spell out: {entry!r}")
            elif setting not in PLAIN and not all("=" in part for part in setting.split(", ")):
                faults.append(f"{title}: a series named without its keys: {entry!r}")
        if any(len(panel) > MAX_SERIES for panel in panels):
            faults.append(f"{title}: a panel of more than {MAX_SERIES} settings: {[len(p) for p in panels]}")
        if any(title.endswith(key) for key in COUNTS) and any("." in t for t in f["xticks"].split(" | ")):
            faults.append(f"{title}: fractional ticks on a count axis: {f['xticks']!r}")
    return faults


AUDITS = sorted(DOCS.glob("*/audit.html"))


@pytest.mark.parametrize("page", AUDITS, ids=[str(p.relative_to(DOCS)) for p in AUDITS])
def test_committed_figures_can_be_decoded(page, tmp_path):
    seen = render(page, tmp_path)
    figures = seen["figures"]
    assert figures, f"{page}: no figure text"
    assert not figure_faults(figures)  # type: ignore[arg-type]
    assert all(f["panels"] or f["kept"] for f in figures), "a rebuilt figure without its panels' series"


def test_the_figure_check_catches_the_faults_a_review_found():
    found = figure_faults([{"title": "Leakage vs victim.num_images", "series": "Series: update, nan, nan: "
                            "fl=cluster_fedavg; 0, all; 0, all.", "axes": "", "xticks": "1 | 1.5 | 4"}])
    for fault in ("'nan' in", "two series share a name", "named without its keys: '0, all'", "fractional ticks"):
        assert any(fault in f for f in found), (fault, found)
    crowded = figure_faults([{"title": "Pareto", "series": "Series: 1: payload=update, defense=none, fl=fedavg, "
                              "model=lenet [front].", "axes": "", "xticks": "", "key": "Key: S1 = a=b.",
                              "panels": json.dumps([[f"k={i}" for i in range(9)], ["S2"]])}])
    for fault in ("over 30 characters", "more than 6 settings", "a code the caption does not spell out: 'S2'"):
        assert any(fault in f for f in crowded), (fault, crowded)
    assert not figure_faults([{"title": "Leakage vs victim.num_images", "series": "Series: payload=update, "
                               "num_images=-; chance.", "axes": "Axes: victim batch (images).", "xticks": "1 | 4 | 16"}])


def test_the_check_catches_a_broken_image_and_a_wide_table(tmp_path):
    bad = tmp_path / "src" / "audit.html"
    bad.parent.mkdir()
    cells = "".join(f"<td>column {i} with a long value</td>" for i in range(80))
    bad.write_text(f"<!doctype html><html><body><img src='data:image/png;base64,AAAA' alt='bad'>"
                   f"<table><tr>{cells}</tr></table></body></html>")
    seen = render(bad, tmp_path)
    assert seen["broken"] == ["bad"] and seen["overflowing"] == [0] and int(str(seen["page"])) > WIDTH


@pytest.mark.slow  # over 1.5 s: the quick suite's 4-minute goal
def test_a_fresh_report_renders(tmp_path):
    from test_report import write_runs

    from privbench.report.__main__ import build_report

    out = build_report(write_runs(tmp_path / "sweep"), tmp_path / "report")
    for name in ("audit.html", "gallery.html"):
        _assert_readable(out / name, tmp_path / name.replace(".", "_"))
