"""``python -m privbench.rescore RESULTS --psnr DB [--ssim S] [--write]``: recount finished runs at another bar.

A true image counts as recovered when its matched reconstruction reaches the bar (``metrics.recovered_psnr``,
``metrics.recovered_ssim``; the default is 20 dB and no SSIM bar). Every run keeps each matched pair's PSNR and
SSIM, for the attack and for each chance baseline, so its recovered fractions are recounted here without
rerunning the attack. Without ``--write`` each run's recount is printed; with it, ``metrics.json``,
``metrics.csv`` and ``gallery.npz`` are rewritten atomically, the old bar kept as ``privacy.rescored_from``, so
``python -m privbench.report RESULTS`` reports the new bar.

Example:
    python -m privbench.rescore results/multirun/2026-12-04_10-00-00 --psnr 25 --ssim 0.8
"""
from __future__ import annotations

import argparse
import copy
import io
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from privbench.audit.output import write_metrics
from privbench.errors import ConfigError
from privbench.figures import NUM_TRUE, RECOVERED_FRACTION, RECOVERED_FRACTION_CHANCE
from privbench.io import atomic_write_bytes, files_named
from privbench.metrics.reconstruction import Recovered
from privbench.regular import load_arrays, read_text, regular


def rescore(metrics: dict[str, Any], bar: Recovered) -> dict[str, Any]:
    """``metrics`` with its recovered fractions recounted at ``bar`` (a copy; ``metrics`` is left alone).

    The chance figure is recounted from each baseline's matched pairs; a run written before they were kept has
    its chance figure set to missing (None), never carried over from the old bar.
    """
    privacy = metrics.get("privacy", {})
    rows, true = privacy.get("matched"), privacy.get(NUM_TRUE.key)
    if not isinstance(rows, list) or not isinstance(true, (int, float)) or true < 1:
        raise ConfigError("no matched reconstruction to recount (a run without a reconstruction, or a failed one)")
    if not all(_pair(row) for row in rows) or len(rows) > true:
        raise ConfigError("its matched pairs are malformed (each needs a numeric psnr and ssim)")
    out = copy.deepcopy(metrics)
    new = out["privacy"]
    new[RECOVERED_FRACTION.key] = bar.count(rows) / true
    chance = new.get("chance") if isinstance(new.get("chance"), dict) else {}
    counted = []
    for baseline in chance.values():
        if isinstance(baseline, dict) and isinstance(baseline.get("matched"), list) and all(
                _pair(row) for row in baseline["matched"]):
            baseline[RECOVERED_FRACTION.key] = bar.count(baseline["matched"]) / true
            counted.append(baseline[RECOVERED_FRACTION.key])
    complete = bool(chance) and len(counted) == len(chance)
    new[RECOVERED_FRACTION_CHANCE.key] = max(counted) if complete else None
    if "rescored_from" not in new:  # the bar the attack itself was scored at
        new["rescored_from"] = privacy.get("recovered_bar", "not recorded")
    new["recovered_bar"] = bar.bar()
    return out


def _pair(row: Any) -> bool:
    return isinstance(row, dict) and all(isinstance(row.get(k), (int, float)) for k in ("psnr", "ssim"))


def _bar_text(recorded: Any) -> str:
    """A recorded ``recovered_bar`` in words (runs written before it was recorded: their config's bar)."""
    if isinstance(recorded, dict) and _pair(recorded):
        return Recovered(psnr=float(recorded["psnr"]), ssim=float(recorded["ssim"])).text()
    return "the bar of its config"


def _regallery(path: Path, bar: Recovered) -> None:
    """Rewrite ``gallery.npz``'s ``recovered`` flags at ``bar`` (its pairs carry PSNR and SSIM)."""
    if not regular(path) or path.is_symlink():
        return
    with load_arrays(path) as gallery:
        arrays = {k: gallery[k] for k in gallery.files}
    if "ssim" not in arrays:
        return
    arrays["recovered"] = np.array([bar.count([{"psnr": p, "ssim": s}]) == 1
                                    for p, s in zip(arrays["psnr"], arrays["ssim"])], dtype=bool)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


def _fraction(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m privbench.rescore", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="a run folder, or a folder of runs (every metrics.json below it)")
    parser.add_argument("--psnr", type=float, required=True, help="the PSNR bar in dB (default bar: 20)")
    parser.add_argument("--ssim", type=float, default=0.0, help="the SSIM bar (default 0: none)")
    parser.add_argument("--write", action="store_true", help="rewrite each run's metrics and gallery at the new bar")
    args = parser.parse_args(argv)
    if not (math.isfinite(args.psnr) and 0 <= args.psnr <= 200) or not (math.isfinite(args.ssim) and -1 <= args.ssim <= 1):
        print("privbench.rescore: error: --psnr must be in [0, 200] dB and --ssim in [-1, 1]", file=sys.stderr)
        raise SystemExit(2)
    if not args.results.is_dir():
        print(f"privbench.rescore: error: {args.results} is not a folder of runs", file=sys.stderr)
        raise SystemExit(2)
    bar = Recovered(psnr=args.psnr, ssim=args.ssim)
    found = [p for p in files_named(args.results, "metrics.json") if p.is_file() and not p.is_symlink()]
    if not found:
        print(f"privbench.rescore: error: no finished run (metrics.json) under {args.results}", file=sys.stderr)
        raise SystemExit(2)
    recounted = 0
    for path in found:
        try:
            metrics = json.loads(read_text(path))
            new = rescore(metrics, bar)
        except (OSError, ValueError, ConfigError) as exc:
            print(f"{path.parent}: skipped: {str(exc).splitlines()[0][:200]}")
            continue
        old, now = metrics["privacy"], new["privacy"]
        print(f"{path.parent}: recovered {_fraction(now[RECOVERED_FRACTION.key])} of {now[NUM_TRUE.key]} to "
              f"{bar.text()} (chance {_fraction(now[RECOVERED_FRACTION_CHANCE.key])}); was "
              f"{_fraction(old.get(RECOVERED_FRACTION.key))} to "
              f"{_bar_text(old.get('recovered_bar'))}")
        if args.write:
            write_metrics(path.parent, new)
            _regallery(path.parent / "gallery.npz", bar)
        recounted += 1
    print(f"privbench.rescore: {recounted} of {len(found)} run(s) recounted"
          + (" and rewritten" if args.write and recounted else "") + f" at {bar.text()}")


if __name__ == "__main__":
    main()
