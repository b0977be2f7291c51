"""CSV cells a spreadsheet opens as text, never as a formula (CSV injection, OWASP).

A cell or column name that is not a number and starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
is written behind a single quote, as is one that starts with a quote itself (a lone character, such as the tables'
missing marker ``-``, is no formula and stays), so that reading it back
(``from_cell``) gives the original exactly. Numbers (``-1.5``, ``-inf``) are written as they are.
"""
from __future__ import annotations

import math
from typing import Any

#: What a spreadsheet reads as the start of a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def to_cell(value: Any) -> Any:
    """``value`` made safe to open in a spreadsheet (strings only; other values as they are).

    Example:
        >>> to_cell("=HYPERLINK(1)"), to_cell("-1.5"), to_cell("+experiment/x=a"), to_cell(-2.0), to_cell("'a")
        ("'=HYPERLINK(1)", '-1.5', "'+experiment/x=a", -2.0, "''a")
    """
    if not isinstance(value, str) or len(value) < 2:  # one character (the tables' missing "-") is no formula
        return value
    if value.startswith("'") or (value.startswith(FORMULA_STARTS) and not _number(value)):
        return "'" + value
    return value


def from_cell(value: Any) -> Any:
    """The value ``to_cell`` was given.

    Example:
        >>> [from_cell(to_cell(v)) for v in ("=1+1", "'x", "-3", "plain")]
        ['=1+1', "'x", '-3', 'plain']
    """
    if isinstance(value, str) and value.startswith("'"):
        return value[1:]
    return value


def safe_row(row: dict[str, Any]) -> dict[str, Any]:
    """A CSV row (name to value) with every name and string cell made safe; NaN stays NaN."""
    return {to_cell(str(k)): (v if isinstance(v, float) and math.isnan(v) else to_cell(v)) for k, v in row.items()}
