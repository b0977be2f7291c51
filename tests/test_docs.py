"""The README is a front door, every link in it and in docs/ resolves inside the repository, and the
payload-kind glossary is what the specs say."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from privbench.payloads.kinds import KINDS

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
AUTOLINK = re.compile(r"<([a-z][a-z0-9+.-]*:[^>\s]+)>", re.I)


def _targets(text: str) -> list[str]:
    return LINK.findall(text) + AUTOLINK.findall(text)


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for heading in ("## Two commands", "## Quick start", "## Headline findings", "## The manual"):
        assert heading in text
    assert "bash scripts/bootstrap.sh audit" in text and "bash scripts/bootstrap.sh test" in text
    assert all(f"`{name}`" in text for name in KINDS)  # the payload kinds in brief


def test_every_link_resolves_inside_the_repository():
    broken = []
    for page in PAGES:
        for target in _targets(page.read_text()):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                broken.append(f"{page.relative_to(ROOT)}: {target} points outside the repository")
                continue
            path = target.split("#", 1)[0]
            if path and not (page.parent / path).resolve().exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} does not exist")
    assert not broken, broken


def test_the_link_check_finds_a_broken_link():
    assert _targets("see [x](docs/missing.md) and <https://example.org>") == ["docs/missing.md",
                                                                             "https://example.org"]


def test_the_payload_kind_glossary_is_generated_from_the_specs():
    spec = importlib.util.spec_from_file_location("payload_kinds", ROOT / "scripts" / "payload_kinds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (ROOT / "docs" / "payload_kinds.md").read_text()
    assert page == module.render(), "docs/payload_kinds.md is out of date: python scripts/payload_kinds.py"
    assert all(f"`{name}`" in page for name in KINDS)


def test_the_manual_states_the_corpus_size_truthfully():
    import re
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from test_invalid_corpus import CORPUS

    stated = re.search(r"`tests/test_invalid_corpus.py`\s+holds (\d+) such invocations", (ROOT / "docs" / "running.md").read_text())
    assert stated and int(stated[1]) == len(CORPUS)


def _design_tree() -> str:
    text = (ROOT / "docs" / "design.md").read_text()
    start = text.index("```\nprivbench/")
    return text[start:text.index("```", start + 3)]


def _unnamed(tree: str) -> list[str]:
    """Folders (as ``name/``) and modules (by file name) under privbench/ (configs aside) that ``tree`` leaves out."""
    package = ROOT / "privbench"
    unnamed = []
    for path in sorted(package.rglob("*")):
        parts = path.relative_to(package).parts
        if "__pycache__" in parts or parts[0] == "conf" or path.name in ("__init__.py", "__main__.py"):
            continue
        if path.is_dir() and not re.search(rf"(?<![\w/]){re.escape(path.name)}/", tree):
            unnamed.append(f"{path.relative_to(ROOT)}/")
        elif path.suffix == ".py" and not re.search(rf"(?<![\w.]){re.escape(path.name)}", tree):
            unnamed.append(str(path.relative_to(ROOT)))
    return unnamed


def test_the_design_tree_names_every_folder_and_module_of_the_package():
    """docs/design.md's tree against the real one."""
    assert not _unnamed(_design_tree())


def test_the_design_tree_check_catches_a_module_or_folder_left_out():
    tree = _design_tree()
    assert _unnamed(tree.replace("mlp.py", "two_layers.py")) == ["privbench/models/mlp.py"]
    assert "privbench/attacks/one_run/" in _unnamed(tree.replace("one_run/", "one_go/"))
