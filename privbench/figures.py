"""How reported figures are shown: one marker for a value that was not measured, one formatter."""
from __future__ import annotations

import math
from typing import Any

#: How every output (summary, tables, HTML) shows a value that was not measured.
MISSING = "-"


def formatted(value: Any, fmt: str) -> str:
    """``value`` formatted with ``fmt``, or ``MISSING`` when it is missing (None or NaN).

    Example:
        >>> formatted(float("nan"), "{:.2f}"), formatted(0.5, "{:.2f}")
        ('-', '0.50')
    """
    return MISSING if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)
