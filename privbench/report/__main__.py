"""``python -m privbench.report RESULTS_DIR``: write the report of every finished run below it."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from privbench.csv_cells import to_cell
from privbench.io import atomic_write_bytes, atomic_write_text
from privbench.report.collect import collect, runs_from_csv
from privbench.report.gallery import gallery_page, style
from privbench.report.html import kept_figures, page
from privbench.report.ladder import ladder_markdown
from privbench.report.paired import contrasts
from privbench.report.paired import to_html as paired_html
from privbench.report.paired import to_markdown as paired_markdown
from privbench.report.plots import write_plots
from privbench.report.roc import roc_figure
from privbench.report.table import summarise, to_markdown

#: The figure drawn from the run folders (``membership.npz``): a rebuild from ``runs.csv`` keeps the earlier page's.
RUN_FOLDER_FIGURE = "Membership ROC"


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every column name and string cell safe to open in a spreadsheet (``privbench.csv_cells``)."""
    safe = frame.rename(columns=lambda c: to_cell(str(c)))
    return safe.apply(lambda column: column.map(to_cell))


def build_report(root: Path, out: Path | None = None) -> Path:
    """Write ``runs.csv``, ``table.csv``, ``table.md``, ``paired.md`` (arms one factor at a time), ``ladder.md``
    (where runs climbed the membership ladder), the figures, ``audit.html`` and ``gallery.html`` to ``out``.

    ``root`` is a results folder, or a report's ``runs.csv``: then the tables, figures and ``audit.html`` are
    rebuilt from it (the gallery and the membership ROC need the run folders: the gallery is left as it is, and
    the earlier page's ROC figure is kept as it was). The
    gallery is written only when some setting rebuilt images.
    """
    from_csv = Path(root).is_file() and Path(root).suffix == ".csv"
    try:
        runs = runs_from_csv(Path(root)) if from_csv else collect(root)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"privbench.report: error: {exc}") from None
    skipped = runs.attrs.get("skipped", [])
    if skipped:
        print(f"privbench.report: skipped {len(skipped)} file(s) that are not finished runs: "
              f"{', '.join(skipped[:10])}{' ...' if len(skipped) > 10 else ''}", file=sys.stderr)
    duplicates = runs.attrs.get("duplicates", [])
    if duplicates:
        print(f"privbench.report: counted each config and seed once; {len(duplicates)} other run(s) of the same config "
              f"and seed left out: {', '.join(duplicates[:10])}{' ...' if len(duplicates) > 10 else ''}",
              file=sys.stderr)
    if runs.empty:
        raise SystemExit(f"privbench.report: error: no finished run (metrics.json) under {root}")
    out = Path(out or (Path(root).parent if from_csv else Path(root) / "report"))
    out.mkdir(parents=True, exist_ok=True)
    table = summarise(runs)
    atomic_write_text(out / "runs.csv", spreadsheet_safe(runs).to_csv(index=False))
    atomic_write_text(out / "table.csv", spreadsheet_safe(table).to_csv(index=False))
    atomic_write_text(out / "table.md", to_markdown(table))
    found = contrasts(runs, list(table.attrs.get("keys", [])))
    atomic_write_text(out / "paired.md", paired_markdown(found))
    plots = write_plots(runs, table, out)
    name = (Path(root).parent if from_csv else Path(root)).resolve().name
    if not from_csv:
        ladder = ladder_markdown(runs, list(table.attrs.get("keys", [])), Path(root))
        if ladder is not None:
            atomic_write_text(out / "ladder.md", ladder)
        roc = roc_figure(runs, table, root)
        if roc is not None:
            plots[RUN_FOLDER_FIGURE] = (out / "membership_roc.png", roc)
            atomic_write_bytes(out / "membership_roc.png", roc.png)
        gallery = gallery_page(table, runs, root=root, title=f"privbench gallery: {name}", style=style())
        if gallery is not None:
            atomic_write_text(out / "gallery.html", gallery)
        elif (out / "gallery.html").exists():  # an earlier report's, from runs that rebuilt images
            (out / "gallery.html").unlink()
    gallery = "gallery.html" if (out / "gallery.html").exists() else None
    old = out / "audit.html"
    kept = kept_figures(old.read_text(), [RUN_FOLDER_FIGURE]) if from_csv and old.exists() else []
    atomic_write_text(out / "audit.html", page(table, runs, plots, title=f"privbench audit: {name}", gallery=gallery,
                                               kept=kept, paired=paired_html(found) if found else ""))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m privbench.report", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a results folder (a sweep or several runs), or a report's "
                        "runs.csv to rebuild its tables and figures")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default RESULTS/report)")
    args = parser.parse_args(argv)
    if not args.results.exists():
        print(f"privbench.report: error: {args.results} does not exist", file=sys.stderr)
        raise SystemExit(2)
    out = build_report(args.results, args.out)
    print(f"report: {out / 'audit.html'}")
    print((out / "table.md").read_text())


if __name__ == "__main__":
    main()
