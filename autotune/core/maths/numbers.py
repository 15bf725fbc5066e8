"""The one way a measured number is written in a table or a line: thousands separated, as many
digits as its size warrants; and a percentage read from a flag. Pure."""

from __future__ import annotations

import math

from autotune.errors import ConfigError


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


def parse_percent(text: str, flag: str) -> float:
    """``5%`` or ``5`` as the fraction 0.05 (more than 0, less than 100%); a one-line error
    naming ``flag``."""
    try:
        value = float(text.strip().removesuffix("%")) / 100
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise ConfigError(f"{flag} {text!r}: expected a percentage above 0 and below 100, "
                          "e.g. 5%")
    return value
