"""The default audit alone and beside copies of itself: does torch's thread choice hold on a shared machine?

Runs ``python -m privbench`` (one process per audit, each in its own results folder, ``resume=false``)
alone with ``threads=auto`` and with ``threads=2`` (the thread count before ``threads=auto``, on a
2-core machine), then ``--together`` copies started at once, with ``threads=auto`` and, with
``--old``, with 2 threads each. Prints each audit's wall time and, for the copies, the slowest
against their fair share (``together x alone / cores``). Run it alone on the machine.

Example:
    python benchmarks/shared_machine.py --together 3 --old -- fl.rounds=3
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def audits(n: int, overrides: list[str], root: Path, tag: str) -> list[float]:
    """Start ``n`` audits at once; their wall times in seconds."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "privbench", f"results_dir={root / f'{tag}{i}'}",
                               "resume=false", *overrides], cwd=root, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(n)]
    times = []
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"audit failed ({proc.returncode}): {err.strip().splitlines()[-1] if err else ''}")
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--together", type=int, default=3, help="audits started at once")
    parser.add_argument("--old", action="store_true", help="also run the copies with threads=2 each")
    parser.add_argument("overrides", nargs="*", help="config overrides for every audit (after --)")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"{cores} cores; default audit {' '.join(args.overrides) or '(no overrides)'}; wall seconds per audit")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        audits(1, [*args.overrides, "attack=none", "fl.rounds=1"], root, "warm")  # imports and data cached
        alone = {t: audits(1, [*args.overrides, f"threads={t}"], root, f"alone{t}")[0] for t in ("auto", 2)}
        for t, s in alone.items():
            print(f"alone, threads={t}: {s:.1f} s")
        fair = args.together * alone["auto"] / cores
        for t in ("auto", 2) if args.old else ("auto",):
            times = audits(args.together, [*args.overrides, f"threads={t}"], root, f"together{t}")
            print(f"{args.together} together, threads={t}: {', '.join(f'{s:.1f}' for s in times)} s; slowest "
                  f"{max(times):.1f} s = {max(times) / fair:.2f}x the fair share {fair:.1f} s "
                  f"({args.together} x {alone['auto']:.1f} s / {cores} cores)")


if __name__ == "__main__":
    main()
