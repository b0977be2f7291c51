"""The report pages in a real headless browser at 1280 px: every image loads, every table fits or scrolls in its box."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_committed_page_renders(page, tmp_path):
    _assert_readable(page, tmp_path)


def test_the_check_catches_a_broken_image_and_a_wide_table(tmp_path):
    bad = tmp_path / "src" / "audit.html"
    bad.parent.mkdir()
    cells = "".join(f"<td>column {i} with a long value</td>" for i in range(80))
    bad.write_text(f"<!doctype html><html><body><img src='data:image/png;base64,AAAA' alt='bad'>"
                   f"<table><tr>{cells}</tr></table></body></html>")
    seen = render(bad, tmp_path)
    assert seen["broken"] == ["bad"] and seen["overflowing"] == [0] and int(str(seen["page"])) > WIDTH


def test_a_fresh_report_renders(tmp_path):
    from test_report import write_runs

    from privbench.report.__main__ import build_report

    out = build_report(write_runs(tmp_path / "sweep"), tmp_path / "report")
    for name in ("audit.html", "gallery.html"):
        _assert_readable(out / name, tmp_path / name.replace(".", "_"))
