"""A reported figure's spec: its key in ``metrics.json``, label and unit, which direction means more leakage, its
range and format."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

#: How every output (summary, tables, HTML) shows a value that was not measured.
MISSING = "-"


@dataclass(frozen=True)
class Figure:
    """One reported figure.

    Attributes:
        key: its name in ``metrics.json`` (and a column of ``metrics.csv`` and the report's tables).
        section: the ``metrics.json`` section it is in (``privacy``, ``utility``, ``bytes``, ``defense``).
        label: how the report names it, with its unit.
        unit: its unit (``dB``, ``B``, or empty).
        fmt: how tables format it.
        leak: which direction means more leakage (``higher``/``lower``; None for figures that measure no leakage).
        bounds: ``unit`` (cannot leave [0, 1]), ``signed_unit`` ([-1, 1], SSIM), ``signed_double`` ([-2, 2], a
            difference of two SSIMs), ``nonnegative`` or ``psnr`` (0 to the 8-bit ceiling, 58.92 dB): the range
            intervals are clipped to.
        best: ``max``/``min``: aggregated over seeds by the best run, not the mean.
    """

    key: str
    section: str
    label: str
    unit: str = ""
    fmt: str = "{:.3g}"
    leak: Literal["higher", "lower"] | None = None
    bounds: Literal["unit", "signed_unit", "signed_double", "nonnegative", "psnr"] | None = None
    best: Literal["max", "min"] | None = None

    def __str__(self) -> str:
        return self.key

    def of(self, metrics: dict[str, Any]) -> Any:
        """This figure's value in a ``metrics.json`` (None when it was not measured)."""
        return metrics.get(self.section, {}).get(self.key)

    def shown(self, values: dict[str, Any], suffix: str = "") -> str:
        """This figure's value in ``values`` (one ``metrics.json`` section, or a summary of one) in its format, or
        ``MISSING``; ``suffix`` reads a companion key (``_lo``/``_hi``: its interval's ends, ``_min``/``_max``).

        Example:
            >>> Figure("psnr_mean", "privacy", "PSNR", fmt="{:.2f}").shown({"psnr_mean": 12.345, "psnr_mean_lo": 1})
            '12.35'
        """
        return formatted(values.get(self.key + suffix), self.fmt)


def privacy(key: str, label: str, **kw: Any) -> Figure:
    """A figure of the ``privacy`` section."""
    return Figure(key, "privacy", label, **kw)


def formatted(value: Any, fmt: str) -> str:
    """``value`` formatted with ``fmt``, or ``MISSING`` when it is missing (None or NaN). A number that JSON
    carried as text (``"inf"``: an epsilon without noise) is formatted as the number.

    Example:
        >>> formatted(float("nan"), "{:.2f}"), formatted(0.5, "{:.2f}"), formatted("inf", "{:.2f}")
        ('-', '0.50', 'inf')
    """
    if isinstance(value, str) and value.strip().lower() in ("inf", "-inf", "infinity", "-infinity", "nan"):
        value = float(value)
    return MISSING if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)
