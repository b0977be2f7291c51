"""Read every finished run (``metrics.json`` and its resolved ``config.yaml``) under a folder into one DataFrame."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from privbench.csv_cells import from_cell
from privbench.figures import ACCURACY, DOWNLOADED_ACCURACY, PERSONAL_ACCURACY, REPORTED
from privbench.io import files_named
from privbench.regular import read_text, regular

#: The config groups a run chose (from ``metrics.json``), in the order the report names them.
CHOICES = ["payload", "attack", "defense", "fl", "model", "data"]
#: Measured figures, one column each (NaN when the run did not measure it, never 0).
FIGURES = [str(f) for f in REPORTED]
#: The pointer a resumed sweep leaves for a skipped job (``privbench.cli``).
RESUMED = "resumed.json"
COLUMNS = [*CHOICES, "seed", *FIGURES, "training_key", "run_dir"]
#: Config entries that never change what a run computes (or are shown by another column).
IGNORED = {"seed", "name", "results_dir", "resume", "data.root", "data.download"}


def _number(value: Any) -> float:
    if value is None:
        return math.nan
    if value == "inf":
        return math.inf
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _value(value: Any) -> Any:
    """A config value as one hashable cell: lists become ``[a, b]``, None ``null``."""
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return value


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys of every leaf of a resolved config, without ``_target_`` and the ``IGNORED`` keys.

    Example:
        >>> flatten({"fl": {"_target_": "x.FedAvg", "lr": 0.1, "gene": {"gamma": 2}}, "seed": 3, "cover": []})
        {'fl.lr': 0.1, 'fl.gene.gamma': 2, 'cover': '[]'}
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if key == "_target_" or name in IGNORED or name == "hydra":
            continue
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = _value(value)
    return out


def row(metrics: dict[str, Any], run_dir: Path, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row from a run's ``metrics.json`` (and resolved config); absent figures are NaN, never 0."""
    run, privacy, utility = metrics.get("run", {}), metrics.get("privacy", {}), metrics.get("utility", {})
    nbytes, defense = metrics.get("bytes", {}), metrics.get("defense", {})
    out: dict[str, Any] = {"fl": run.get("fl"), "payload": run.get("payload") or "-", "attack": run.get("attack"),
                           "defense": run.get("defense"), "model": run.get("model"), "data": run.get("data"),
                           "seed": run.get("seed"), "training_key": run.get("training_key"), "run_dir": str(run_dir)}
    for section in (privacy, utility, nbytes, defense):
        for key in FIGURES:
            if key in section:
                out[key] = _number(section[key])
    for key in FIGURES:
        out.setdefault(key, math.nan)
    out.update(flatten(config or {}))
    return out


def _read(path: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A finished run's metrics and resolved config; None for a run being written or a foreign file."""
    try:
        metrics = json.loads(read_text(path))  # a regular file of at most 64 MiB: never a pipe or a device
    except (OSError, ValueError):
        return None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("run"), dict):
        return None
    config: Any = {}
    config_path = path.parent / "config.yaml"
    if regular(config_path):
        try:
            config = OmegaConf.to_container(OmegaConf.create(read_text(config_path))) or {}
        except Exception:  # noqa: BLE001 - an unreadable config only loses the grouping keys
            config = {}
    return metrics, config if isinstance(config, dict) else {}


def _written(path: Path) -> float:
    """When ``path`` was last written (0 when it cannot be read)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def collect(root: Path) -> pd.DataFrame:
    """All finished runs under ``root`` (recursively), one row each: ``COLUMNS``, then one column per
    flattened config key (``fl.gene.gamma``, ``defense.target_epsilon``, ...). ``run_dir`` is relative to ``root``
    (absolute for a run a ``resumed.json`` points to outside it). Files that cannot be read as a finished run are
    listed in ``attrs["skipped"]``; a config and seed (``run.config_key``) finished more than once is counted once,
    by its newest run (its ``metrics.json`` written last), the others listed in ``attrs["duplicates"]``.
    """
    rows, skipped, duplicates, seen, keys = [], [], [], set(), set()
    root = Path(root)
    paths = files_named(root, "metrics.json")
    for pointer in files_named(root, RESUMED):  # a resumed sweep's skipped jobs point at the runs they reused
        try:
            paths.append(Path(json.loads(read_text(pointer, root=root))["finished_in"]) / "metrics.json")
        except (OSError, ValueError, KeyError, TypeError):
            skipped.append(str(pointer.relative_to(root)))
    paths.sort(key=_written, reverse=True)  # newest first: a rerun (resume=false) replaces what it reran
    for path in paths:
        inside = path.is_relative_to(root)
        if (inside and "report" in path.relative_to(root).parts[:-1]) or path.resolve() in seen:
            continue
        seen.add(path.resolve())
        found = _read(path)
        if found is None:
            skipped.append(str(path.relative_to(root) if inside else path))
            continue
        key = found[0]["run"].get("config_key")
        if key is not None and key in keys:  # a config and seed finished twice (resume=false): counted once
            duplicates.append(str(path.relative_to(root) if inside else path))
            continue
        keys.add(key)
        rows.append((str(path), row(found[0], path.parent.relative_to(root) if inside else path.parent, found[1])))
    frame = named_accuracies(_frame([r for _, r in sorted(rows, key=lambda pair: pair[0])]))  # in path order
    frame.attrs["skipped"] = skipped
    frame.attrs["duplicates"] = duplicates
    return frame


def named_accuracies(frame: pd.DataFrame) -> pd.DataFrame:
    """Fill the own-model and downloaded-model columns of runs written before they existed.

    Such a run's ``accuracy`` is the own-model figure for local-only and ``fl.eval=personal``, and the
    downloaded-model figure for FedAvg and ``fl.eval`` cluster or both; only missing cells are filled.
    """
    if frame.empty:
        return frame
    frame = frame.copy()
    for column in (PERSONAL_ACCURACY.key, DOWNLOADED_ACCURACY.key, ACCURACY.key):
        if column not in frame:
            frame[column] = math.nan
    evals = frame["fl.eval"] if "fl.eval" in frame else pd.Series(math.nan, index=frame.index)
    own = (frame["fl"] == "local") | (evals == "personal")
    for column, rows in ((PERSONAL_ACCURACY.key, own), (DOWNLOADED_ACCURACY.key, ~own & frame["fl"].notna())):
        fill = rows & frame[column].isna() & frame[ACCURACY.key].notna()
        frame.loc[fill, column] = frame.loc[fill, ACCURACY.key]
    return frame


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=COLUMNS)
    for column in COLUMNS:
        if column not in frame:
            frame[column] = math.nan
    extra = sorted(c for c in frame.columns if c not in COLUMNS)
    return frame[COLUMNS + extra]


def _cell(value: str) -> Any:
    """A ``runs.csv`` cell as ``collect`` had it: empty as NaN, numbers as numbers, other text as it was written."""
    if value == "":
        return math.nan
    try:
        number = float(value)
    except ValueError:
        return value
    if value.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
        return number
    return int(number) if number.is_integer() and "." not in value and "e" not in value.lower() else number


def runs_from_csv(path: Path) -> pd.DataFrame:
    """The runs of a report's ``runs.csv`` (as ``collect`` gave them), to rebuild its tables and figures without the
    run folders."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame = frame.rename(columns=from_cell)
    for column in frame.columns:
        frame[column] = frame[column].map(lambda value: _cell(from_cell(value)))
    missing = [c for c in ("seed", "run_dir") if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a report's runs.csv (no {', '.join(missing)} column)")
    frame = named_accuracies(frame)
    frame.attrs["skipped"] = []
    return frame
