"""Arms compared one factor at a time: for every two settings of a sweep that differ in exactly one config value (or
in keys only one of them has, an arm's own settings), the paired difference of each figure both measured, over the
seeds both ran (run of seed s minus run of seed s):
its mean, 95 % Student-t interval, and the seeds whose difference has the mean's sign. A setting's repeated runs of
one seed are averaged first. Other config values that change with the factor (set by the same arm) are named
beside it. ``paired.md`` and the audit page list them; a difference whose interval excludes 0 is reported as
holding."""
from __future__ import annotations

import html
import itertools
import math
from dataclasses import dataclass

import pandas as pd

from privbench.figures import MISSING, PAIRED, formatted
from privbench.report.collect import COLUMNS
from privbench.report.table import t_interval

#: Most contrasts listed (in the order the settings first appear); a sweep of many settings lists its first ones and
#: says so.
MOST = 400


@dataclass(frozen=True)
class Contrast:
    """One figure's paired difference between two settings that differ only in ``factor`` (``b`` minus ``a``)."""

    factor: str
    a: str
    b: str
    fixed: str
    with_it: str
    figure: str
    n: int
    mean: float
    lo: float
    hi: float
    agree: int

    @property
    def holds(self) -> bool:
        """Whether the interval excludes 0."""
        return self.n >= 2 and (self.lo > 0 or self.hi < 0)


def contrasts(runs: pd.DataFrame, keys: list[str]) -> list[Contrast]:
    """Every paired difference of the sweep ``runs`` grouped by ``keys`` (the table's), one factor at a time.

    Example:
        >>> runs = pd.DataFrame({"attack": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1],
        ...                      "psnr_gain": [1.0, 2.0, 4.0, 6.0]})
        >>> c = contrasts(runs, ["attack"])[0]
        >>> (c.factor, c.a, c.b, c.figure, c.n, c.mean, c.agree)
        ('attack', 'a', 'b', 'psnr_gain', 2, 3.5, 2)
    """
    figures = [f.key for f in PAIRED if f.key in runs]
    if not keys or not figures or "seed" not in runs:
        return []
    config = [c for c in runs.columns if c not in COLUMNS and c not in keys and c != "seed"]
    shown = runs.assign(**{k: runs[k].map(_value) for k in [*keys, *config]})
    settings = {(k if isinstance(k, tuple) else (k,)): g for k, g in shown.groupby(keys, sort=False, dropna=False)}
    # each setting once: its config values (constant over its runs) and its figures averaged per seed
    values = {k: g[config].iloc[0] for k, g in settings.items()}
    per_seed = {k: g[["seed", *figures]].apply(pd.to_numeric, errors="coerce").groupby("seed").mean()
                for k, g in settings.items()}
    out: list[Contrast] = []
    every = list(settings)
    for one, two in itertools.combinations(every, 2):
        changed = [i for i, (x, y) in enumerate(zip(one, two)) if x != y]
        differ = [i for i in changed if MISSING not in (one[i], two[i])]  # a key one side lacks is its arm's own
        if len(differ) > 1 or (not differ and len(changed) != 1 and not _one_sided(one, two, changed)):
            continue
        if len(differ) == 1 and not _own_keys(every, one, two, differ[0], changed):
            continue
        i = (differ or changed)[0]
        fixed = ", ".join(f"{k}={v}" for j, (k, v) in enumerate(zip(keys, one)) if j not in changed)
        tied = [f"{keys[j]}={one[j]}->{two[j]}" for j in changed if j != i]
        with_it = ", ".join([*tied, *(f"{c}={values[one][c]}->{values[two][c]}" for c in config
                                      if values[one][c] != values[two][c])])
        both = per_seed[one].merge(per_seed[two], left_index=True, right_index=True, suffixes=("_a", "_b"))
        for name in figures:
            d = (both[f"{name}_b"] - both[f"{name}_a"]).replace([math.inf, -math.inf], math.nan).dropna()
            if d.empty:
                continue
            lo, hi = t_interval(d)
            mean = float(d.mean())
            agree = int((d * math.copysign(1.0, mean) > 0).sum()) if mean else 0
            out.append(Contrast(keys[i], str(one[i]), str(two[i]), fixed, with_it, name, len(d), mean, lo, hi, agree))
    return out


def _one_sided(one: tuple[str, ...], two: tuple[str, ...], changed: list[int]) -> bool:
    """Whether every changed key is one setting's own (the other has none of them): an arm that adds several keys,
    one factor (plain averaging against DP-FedAvg's clipping, noise and accountant)."""
    return all(one[i] == MISSING for i in changed) or all(two[i] == MISSING for i in changed)


def _own_keys(settings: list[tuple[str, ...]], one: tuple[str, ...], two: tuple[str, ...], factor: int,
              changed: list[int]) -> bool:
    """Whether every key that changes besides ``factor`` is the other side's own: the side that lacks it never has
    it at its value of ``factor`` (the other keys as they are). A key such a setting does have elsewhere in the sweep
    is an axis of its own (DP-FedAvg's arm against another attack), so the pair is two factors apart."""
    fixed = [k for k in range(len(one)) if k not in changed]
    for j in changed:
        if j == factor:
            continue
        lacking = one if one[j] == MISSING else two
        if any(s[j] != MISSING for s in settings
               if s[factor] == lacking[factor] and all(s[k] == lacking[k] for k in fixed)):
            return False
    return True


def _value(value: object) -> str:
    """A setting's value as the table writes it: ``-`` where a run has no such key, whole floats as integers."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _rows(found: list[Contrast]) -> list[list[str]]:
    fmt = {f.key: _signed(f.fmt) for f in PAIRED}
    labels = {f.key: f.label for f in PAIRED}
    return [[c.factor + (f" (with {c.with_it})" if c.with_it else ""), f"{c.a} -> {c.b}", c.fixed or MISSING,
             labels[c.figure], str(c.n),
             f"{formatted(c.mean, fmt[c.figure])} [{formatted(c.lo, fmt[c.figure])}, {formatted(c.hi, fmt[c.figure])}]",
             f"{c.agree} of {c.n}", "yes" if c.holds else "no"]
            for c in found[:MOST]]


def _signed(fmt: str) -> str:
    """A figure's format for a difference: signed, and with decimals where the figure has none (a share of 0/1).

    Example:
        >>> _signed("{:.2f}"), _signed("{:.0f}"), _signed("{:,.0f}"), _signed("{:+.2f}")
        ('{:+.2f}', '{:+.3f}', '{:+,.0f}', '{:+.2f}')
    """
    if fmt in ("{}", "{:.0f}"):
        return "{:+.3f}"
    return fmt if "+" in fmt else fmt.replace("{:", "{:+", 1)


HEADER = ["factor", "from -> to", "other settings", "figure", "seeds", "difference (to - from) [95 % t]",
          "seeds with its sign", "interval excludes 0"]
CAPTION = ("Paired differences, one factor at a time: every two settings that differ in one grouping key (keys "
           "only one of them has, and other config values the same arm sets, are named with it), each figure's "
           "difference between their runs of the same seed, mean and 95 % Student-t interval over those seeds (no "
           "interval with one seed).")


def to_markdown(found: list[Contrast]) -> str:
    """``paired.md``: the caption and one row per contrast (at most ``MOST``)."""
    more = f" The first {MOST} of {len(found)} are listed." if len(found) > MOST else ""
    rows = _rows(found)
    body = ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join([CAPTION + more, "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER), *body]) + "\n"


def to_html(found: list[Contrast]) -> str:
    """The same contrasts as an HTML table (escaped)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in _rows(found))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
