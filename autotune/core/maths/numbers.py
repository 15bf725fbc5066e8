"""The one way a measured number is written in a table or a line: thousands separated, as many
digits as its size warrants. Pure."""

from __future__ import annotations

import math


def number_text(x: float, scale: float | None = None) -> str:
    """'1,234' from 100 up, '12.3' from 1, '0.0123' (three significant digits) below 1; the
    digits follow ``scale`` where given (an interval's bounds follow its mean: '950 [912,
    1,003]', never '950 [912.4, 1,003]'); 'inf' and 'nan' as such."""
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    size = abs(x if scale is None or not math.isfinite(scale) else scale)
    # sized after rounding: 99.96 is written '100', not '100.0'; 0.9996 '1.0', not '1.000'
    size = max(size, abs(round(size, 1)) if size >= 1 else float(f"{size:.3g}"))
    if size >= 100:
        return f"{x:,.0f}"
    if size >= 1 or size == 0:
        return f"{x:,.1f}"
    return f"{x:,.{max(1, 2 - math.floor(math.log10(size)))}f}"
