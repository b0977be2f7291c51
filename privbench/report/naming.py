"""Names of settings in figures: ``key=value`` by the keys that differ, at most ``LIMIT`` characters (longer ones
become codes that the figure's caption spells out), and small multiples of at most ``MAX_SERIES`` settings."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from privbench.figures import MISSING
from privbench.report.grouping import token

#: The most series (settings) one panel draws, and the longest legend entry or point label.
MAX_SERIES, LIMIT = 6, 30


def value_text(value: Any) -> str:
    """A config value in a legend: whole numbers without a decimal point, missing values as the missing marker,
    lists without spaces (a legend's ", " separates settings).

    Example:
        >>> value_text(4.0), value_text([1000, 200]), value_text("[1000, 200]")
        ('4', '[1000,200]', '[1000,200]')
    """
    if token(value) == token(None):
        return MISSING
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(value_text(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    return text.replace(", ", ",") if text.startswith("[") and text.endswith("]") else text


def key_names(keys: list[str]) -> dict[str, str]:
    """Each key's name in a legend: its last part (``num_images``), the whole key where two would collide."""
    short = {k: k.split(".")[-1] for k in keys}
    clashes = {v for v in short.values() if list(short.values()).count(v) > 1}
    return {k: (k if short[k] in clashes else short[k]) for k in keys}


def differing(settings: list[tuple[Any, ...]], keys: list[str]) -> list[str]:
    """The keys whose value differs between ``settings`` (tuples in the order of ``keys``)."""
    return [k for i, k in enumerate(keys) if len({token(s[i]) for s in settings}) > 1]


def series_names(settings: list[tuple[Any, ...]], keys: list[str]) -> list[str]:
    """A full name per setting: ``key=value`` for each of ``keys`` whose value differs between the settings (all of
    them when none differs).

    Example:
        >>> series_names([("update", float("nan")), ("gradient", 4.0)], ["payload", "victim.num_images"])
        ['payload=update, num_images=-', 'payload=gradient, num_images=4']
    """
    names = key_names(keys)
    differ = [keys.index(k) for k in differing(settings, keys)] or list(range(len(keys)))
    return [", ".join(f"{names[keys[i]]}={value_text(s[i])}" for i in differ) or "all runs" for s in settings]


def setting_text(values: dict[str, Any]) -> str:
    """The whole setting, every key: what a caption's key spells out for a code."""
    return ", ".join(f"{k}={value_text(v)}" for k, v in values.items()) or "all runs"


class Codes:
    """Short names of one figure: a name of at most ``LIMIT`` characters is kept; a longer one becomes ``S1``,
    ``S2``, ... and ``key`` records what each code stands for (the page's caption prints it).

    Example:
        >>> codes = Codes()
        >>> codes.short("payload=update", "x"), codes.short("payload=update, defense=quantize, bits=8", "full")
        ('payload=update', 'S1')
        >>> codes.key
        ['S1 = full']
    """

    def __init__(self) -> None:
        self.key: list[str] = []
        self._of: dict[str, str] = {}

    def short(self, name: str, full: str) -> str:
        """``name`` when it fits, else the code of ``full`` (one code per full setting)."""
        if len(name) <= LIMIT:
            return name
        if full not in self._of:
            self._of[full] = f"S{len(self._of) + 1}"
            self.key.append(f"{self._of[full]} = {full}")
        return self._of[full]


def _longest(tokens: pd.DataFrame, items: pd.DataFrame, panels: list[list[int]], by: list[str]) -> int:
    """The longest ``key=value`` name in ``panels``, naming each by the keys (not in ``by``) that differ within it."""
    names = key_names(list(items.columns))
    longest = 0
    for panel in panels:
        rest = [k for k in tokens.columns if k not in by and tokens[k].iloc[panel].nunique() > 1]
        for i in panel:
            longest = max(longest, sum(len(f"{names[k]}={value_text(items[k].iloc[i])}, ") for k in rest) - 2)
    return longest


def facets(items: pd.DataFrame, keys: list[str], *, most: int = MAX_SERIES,
           candidates: list[str] | None = None) -> tuple[list[str], list[list[int]]]:
    """Split ``items`` (one row per series, a column per key) into panels of at most ``most`` rows whose names
    (by the keys that differ within a panel) fit ``LIMIT`` characters where a facet can make them: greedily facet
    by the key (of ``candidates``, default ``keys``) that best shrinks the largest panel, then the longest name,
    with the fewest panels (a name is only shortened so while that leaves at most 16 panels of 2 or more); cut any panel still too large into consecutive pieces. Returns the facet keys and
    each panel's row positions, in the rows' order.

    Example:
        >>> frame = pd.DataFrame({"a": ["x"] * 4 + ["y"] * 4, "b": list(range(8))})
        >>> facets(frame, ["a", "b"], most=4)
        (['a'], [[0, 1, 2, 3], [4, 5, 6, 7]])
    """
    tokens = items[keys].map(token) if keys else pd.DataFrame(index=items.index)
    chosen: list[str] = []

    def groups(by: list[str]) -> list[list[int]]:
        if not by:
            return [list(range(len(items)))]
        labels = tokens[by].agg("\x01".join, axis=1).to_numpy()
        return [[int(i) for i in np.flatnonzero(labels == v)] for v in dict.fromkeys(labels)]

    def cost(by: list[str]) -> tuple[int, int, int, int]:
        panels = groups(by)
        size, longest = max(map(len, panels)), _longest(tokens, items[keys], panels, by)
        return (max(size - most, 0), max(longest - LIMIT, 0), len(panels), size)

    now = cost(chosen)
    while now[:2] != (0, 0):
        options = [(cost([*chosen, k]), i, k) for i, k in enumerate(candidates if candidates is not None else keys)
                   if k not in chosen and tokens[k].nunique() > 1]
        best = min(options, default=None)
        if best is None or best[0] >= now or (now[0] == 0 and (best[0][2] > 16 or min(
                map(len, groups([*chosen, best[2]]))) < 2)):
            break  # for names alone: never more than 16 panels, never a panel of one setting
        chosen.append(best[2])
        now = best[0]
    panels = groups(chosen)
    return chosen, [panel[i:i + most] for panel in panels for i in range(0, len(panel), most)]


def facet_title(row: pd.Series, by: list[str], names: dict[str, str] | None = None) -> str:
    """A panel's title: its facet keys' values (``key=value, ...``)."""
    names = names or key_names(by)
    return ", ".join(f"{names.get(k, k)}={value_text(row[k])}" for k in by)
