"""The claims register: each headline finding's figures, the table row each is read from, and the commands that
write those tables (``docs/claims.yaml``); ``check`` says where a figure no longer matches its cell, and ``render``
writes the register as the page the README's findings link to (``docs/claims.md``).

A figure matches its cell when each of its numbers (a mean, then its interval) equals the cell's numbers from
``at`` on, times ``scale`` (100 for a share written in percent), to the figure's last written digit; ``part``
picks one number of a figure that names several cells (``89 %, 80 % and 65 %``). A ``span`` figure (``+16 to
+25 dB``) is the lowest and highest of the cells of every row its ``row`` matches (a list value: any of them).
Every other figure-like string of a finding (``figure_strings``) is a setting, a paper's own figure or a chance that
is a definition (``context``), or a measured figure no committed table holds yet (``untabled``, listed, not checked).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from privbench.errors import ConfigError
from privbench.io import atomic_write_text

_NUMBER = re.compile(r"(?<![\d.])[-+]?\d(?:\d|,\d{3})*(?:\.\d+)?")
_RULE = re.compile(r"^\|[-| :]+\|$")
_LINK = re.compile(r"\]\([^)]*\)")
_FIGURE = re.compile(r"(?<![\w.^/])[-+]?\d(?:\d|,\d{3})*(?:\.\d+)?(?:\s?(?:%|dB\b|MB\b|kB\b))?"
                     r"(?:\s?\[[-+]?\d[-+\d., ]*\])?")
_FIGURE_MARK = re.compile(r"[.%\[]|dB|MB|kB")


@dataclass(frozen=True)
class Figure:
    """One figure of a finding, as the README writes it, and the table cell it is read from."""

    says: str
    table: str
    row: dict[str, str | list[str]]
    column: str
    scale: float = 1.0
    at: int = 0
    part: int | None = None
    span: bool = False


@dataclass(frozen=True)
class Finding:
    """A headline finding: its anchor, the README bullet's opening words, its figures, the commands behind them, its
    figure-like strings that are not measured here (``context``) and its measured ones no committed table holds."""

    id: str
    readme: str
    command: str
    figures: list[Figure] = field(default_factory=list)
    context: list[str] = field(default_factory=list)
    untabled: list[str] = field(default_factory=list)


def load(path: Path) -> list[Finding]:
    """The register at ``path``; a malformed entry is one ``ConfigError`` line."""
    raw: Any = OmegaConf.to_container(OmegaConf.load(path))
    try:
        return [Finding(id=str(f["id"]), readme=str(f["readme"]), command=str(f["command"]).strip(),
                        figures=[Figure(says=str(g["says"]), table=str(g["table"]),
                                        row={str(k): [str(x) for x in v] if isinstance(v, list) else str(v)
                                             for k, v in g["row"].items()},
                                        column=str(g["column"]), scale=float(g.get("scale", 1.0)),
                                        at=int(g.get("at", 0)), part=None if g.get("part") is None else int(g["part"]),
                                        span=bool(g.get("span", False)))
                                 for g in f["figures"]],
                        context=[str(c) for c in f.get("context") or []],
                        untabled=[str(c) for c in f.get("untabled") or []])
                for f in raw["findings"]]
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{path}: malformed claims register ({exc!r})") from None


def tables(text: str) -> list[list[dict[str, str]]]:
    """The markdown tables of ``text``, each as rows keyed by header (cells stripped, bold marks kept)."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and _RULE.match(lines[i + 1].strip()):
            head = [h.strip() for h in lines[i].strip().strip("|").split("|")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(dict(zip(head, (c.strip() for c in lines[i].strip().strip("|").split("|")))))
                i += 1
            out.append(rows)
        else:
            i += 1
    return out


def _matches(row: dict[str, str], wanted: dict[str, str | list[str]]) -> bool:
    return all(row.get(k) in v if isinstance(v, list) else row.get(k) == v for k, v in wanted.items())


def cells(figure: Figure, root: Path) -> list[str]:
    """The cells ``figure`` is read from: its column in the rows whose cells equal ``figure.row`` (one row, or, for
    a ``span``, at least two), in the first table of ``figure.table`` that has all those columns."""
    for rows in tables((root / figure.table).read_text()):
        if rows and all(k in rows[0] for k in (*figure.row, figure.column)):
            hits = [r.get(figure.column, "") for r in rows if _matches(r, figure.row)]
            if len(hits) != 1 and not (figure.span and len(hits) >= 2):
                raise ConfigError(f"{figure.table}: {len(hits)} rows match {figure.row} "
                                  f"({'two or more' if figure.span else 'one'} expected)")
            return hits
    raise ConfigError(f"{figure.table}: no table has the columns {[*figure.row, figure.column]}")


def cell(figure: Figure, root: Path) -> str:
    """The cell (or, for a ``span``, the cells joined by ``; ``) ``figure`` is read from."""
    return "; ".join(cells(figure, root))


def numbers(text: str) -> list[tuple[float, int]]:
    """Each number of ``text`` with its count of written decimals.

    Example:
        >>> numbers("74 % [72, 76]"), numbers("+16.4 dB [+0.2, +32.7]")[0], numbers("1,024 bins, 88-90 %")
        ([(74.0, 0), (72.0, 0), (76.0, 0)], (16.4, 1), [(1024.0, 0), (88.0, 0), (90.0, 0)])
    """
    return [(float(m.replace(",", "")), len(m.split(".")[1]) if "." in m else 0) for m in _NUMBER.findall(text)]


def figure_strings(bullet: str) -> list[str]:
    """The figure-like strings of ``bullet`` (whitespace collapsed): each number with a unit (%, dB, MB, kB), a
    decimal point or an interval in brackets after it, with that unit and interval; link targets are skipped.

    Example:
        >>> figure_strings("lr 0.004: 34 % [22, 45] of 50, -1.5 to +4.7 dB, 2 x 300 steps ([a](docs/claims.md#a-1.5))")
        ['0.004', '34 % [22, 45]', '-1.5', '+4.7 dB']
    """
    text = _LINK.sub("]", " ".join(bullet.split()))
    return [m for m in _FIGURE.findall(text) if _FIGURE_MARK.search(m)]


def unregistered(finding: Finding, bullet: str) -> list[str]:
    """Why ``bullet``'s figures are not all accounted for by ``finding`` (empty: they are): each figure-like string
    that its figures' ``says``, its ``context`` and its ``untabled`` strings do not hold as often as the bullet has
    it, and each ``context`` or ``untabled`` string the bullet does not hold."""
    texts = {g.says for g in finding.figures} | {*finding.context, *finding.untabled}
    held = Counter(s for text in texts for s in figure_strings(text))
    missing = Counter(figure_strings(bullet)) - held
    stale = [c for c in (*finding.context, *finding.untabled) if " ".join(c.split()) not in " ".join(bullet.split())]
    return ([f"{s!r} is in no figure, context or untabled string" for s in missing.elements()]
            + [f"{c!r} is not in the finding" for c in stale])


def problem(figure: Figure, root: Path) -> str | None:
    """Why ``figure`` is not its cell (None: it is)."""
    try:
        found = cells(figure, root)
    except (ConfigError, OSError) as exc:
        return str(exc)
    text = "; ".join(found)
    read = [v for v, _ in numbers(text)][figure.at:]
    if figure.span:
        firsts = [numbers(c)[figure.at][0] for c in found if len(numbers(c)) > figure.at]
        read = [min(firsts), max(firsts)] if len(firsts) == len(found) else []
    written = numbers(figure.says)
    if figure.part is not None:
        written = written[figure.part:figure.part + 1]
    if not written:
        return f"{figure.says!r}: no number to check (part {figure.part})"
    if len(read) < len(written):
        return f"{figure.says!r}: the cell {text!r} has fewer numbers"
    for (value, decimals), got in zip(written, read):
        if abs(value - got * figure.scale) > 0.5 * 10 ** -decimals + 1e-9:
            return f"{figure.says!r} is not the cell {text!r} of {figure.table} (x {figure.scale:g})"
    return None


def stale_reports(path: Path) -> dict[str, str]:
    """The register's ``stale`` table: each committed report whose checked row no longer reproduces on today's code
    (``tests/test_study_rows.py``), and what moved."""
    raw: Any = OmegaConf.to_container(OmegaConf.load(path))
    stale = raw.get("stale") or {}
    if not isinstance(stale, dict):
        raise ConfigError(f"{path}: stale must map a report's name to what moved")
    return {str(k): str(v) for k, v in stale.items()}


def _stale_line(finding: Finding, stale: dict[str, str]) -> list[str]:
    """A warning under a finding whose figures come from a stale report's table."""
    moved = sorted({r for g in finding.figures for r in stale if g.table.startswith(f"docs/studies/{r}/")})
    if not moved:
        return []
    return ["**Stale table:** " + "; ".join(f"`{r}`'s checked row no longer reproduces on today's code ({stale[r]})"
                                              for r in moved)
            + ". The figures below are the committed report's until its study is rerun.", ""]


def render(findings: list[Finding], stale: dict[str, str] | None = None) -> str:
    """The register as markdown: per finding, each figure with its table, row and cell, and the commands; a finding
    read from a ``stale`` report says so."""
    lines = ["# Claims register", "",
             "Each headline finding of the README, the table cell each of its figures is read from, and the commands "
             "that write those tables. Generated from `docs/claims.yaml` by `python -m privbench.report.claims`; "
             "`tests/test_claims.py` fails when a README figure is not its cell, or is neither a registered figure "
             "nor listed below its finding as not measured here or as in no committed table.", ""]
    for f in findings:
        lines += [f'<a id="{f.id}"></a>', f"## {f.readme}", "", *_stale_line(f, stale or {}),
                  "| figure | table | row | column | cell |", "|---|---|---|---|---|"]
        for g in f.figures:
            row = ", ".join(f"{k} = {' or '.join(v) if isinstance(v, list) else v}" for k, v in g.row.items())
            row += " (lowest and highest)" if g.span else ""
            scaled = "" if g.scale == 1 else f" (x {g.scale:g})"
            link = Path(g.table).relative_to("docs") if g.table.startswith("docs/") else Path("..") / g.table
            lines.append(f"| {g.says} | [{g.table}]({link}) | {row} | {g.column}{scaled} | "
                         f"{_cell_text(g)} |")
        notes = [("Not measured here (settings, papers' own figures)", f.context),
                 ("Measured, but in no committed table (not checked)", f.untabled)]
        lines += ["", *(f"{label}: {'; '.join(texts)}.\n" for label, texts in notes if texts)]
        lines += ["<!-- example: skip: the sweeps behind the tables (minutes to hours); tests/test_configs.py "
                  "plans every value a study sweeps, tests/test_claims.py checks each figure against its table -->",
                  "```bash", f.command, "```", ""]
    return "\n".join(lines)


def _cell_text(figure: Figure) -> str:
    try:
        return cell(figure, _root()).replace("|", "/")
    except (ConfigError, OSError) as exc:
        return f"(not found: {exc})"


def _root() -> Path:
    return Path(__file__).resolve().parents[2]


def main(argv: Any = None) -> int:
    """``python -m privbench.report.claims``: check the register and rewrite ``docs/claims.md``."""
    root = _root()
    findings = load(root / "docs" / "claims.yaml")
    bad = [f"{f.id}: {p}" for f in findings for g in f.figures if (p := problem(g, root))]
    atomic_write_text(root / "docs" / "claims.md",
                      render(findings, stale_reports(root / "docs" / "claims.yaml")) + "\n")
    print("\n".join(bad) or f"{sum(len(f.figures) for f in findings)} figures match their cells; "
          f"{sum(len(f.context) for f in findings)} context strings (not measured here), "
          f"{sum(len(f.untabled) for f in findings)} measured figures in no committed table")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
