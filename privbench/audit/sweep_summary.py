"""The table a multirun ends with: every finished run of its sweep folder, one row per setting."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from privbench.figures import LEAKS, MULTIRUN, RUNS, formatted

#: (figure, header) of the combined table, after the setting's keys and n (``privbench.figures``).
FIGURES = MULTIRUN


def combined_table(root: Path) -> str:
    """Finished runs under ``root`` grouped by setting (every differing config value but the seed): keys, n, mean
    PSNR and its gain over chance, the leak verdict, accuracy, total bytes and epsilon, as aligned text."""
    from privbench.report.collect import collect
    from privbench.report.table import FAILED, summarise

    runs = collect(root)
    if runs.empty:
        return f"no finished run under {root}"
    table = summarise(runs)
    keys = list(table.attrs["keys"])
    shown = [(str(c), h, "{}" if isinstance(c, str) else c.fmt) for c, h in FIGURES
             if str(c) in table and not table[str(c)].isna().all()]
    header = [k.rsplit(".", 1)[-1] for k in keys] + ["n"] + [h for _, h, _ in shown]
    short = {FAILED: "failed"}  # the leak verdict's terminal form (the report writes "attack failed")
    rows = [[formatted(r[k], "{}") for k in keys] + [str(r[RUNS])] +
            [short.get(r[c], formatted(r[c], f)) if c == LEAKS else formatted(r[c], f) for c, _, f in shown]
            for _, r in table.iterrows()]
    widths = [max(len(x) for x in column) for column in zip(header, *rows)]
    lines = [" ".join(x.rjust(w) if i >= len(keys) else x.ljust(w) for i, (x, w) in enumerate(zip(row, widths)))
             for row in [header, *rows]]
    return "\n".join([f"{len(runs)} finished runs in {root}; mean over seeds (n); PSNR and its gain over chance in dB",
                      *lines])


class SweepSummary(Callback):
    """Hydra callback: after a multirun, print the combined table of its sweep folder."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        root = Path(str(config.hydra.sweep.dir))
        print(combined_table(root))
        print(f"report: python -m privbench.report {root}")
