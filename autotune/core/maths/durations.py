"""The one way a duration is written (as a person says it, or as a clock) and read from a
flag. Pure."""

from __future__ import annotations

import math
import re

from autotune.errors import ConfigError

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def duration_text(seconds: float, *, clock: bool = False) -> str:
    """'45 s', '3 min 15 s', '1 h 40 min', '3 days'; with ``clock``, '0:03:15' (the elapsed
    time of progress lines, whose width stays put)."""
    if not math.isfinite(seconds):
        return "unbounded"
    s = int(round(max(seconds, 0.0)))
    if clock:
        return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        minutes, rest = divmod(s, 60)
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    minutes = round(s / 60)
    hours, minutes = divmod(minutes, 60)
    if hours >= 48:
        return f"{hours / 24:.0f} days"
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def parse_duration(text: str, flag: str) -> float:
    """Seconds of ``2h``, ``20m``, ``90s`` or ``1h30m``; a one-line error naming ``flag``."""
    m = _DURATION.match(text.strip().lower())
    if not text.strip() or m is None or not any(m.groups()):
        raise ConfigError(f"{flag} {text!r}: expected a duration such as 20m, 2h, 1h30m or 90s")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ConfigError(f"{flag} {text!r}: must be more than zero")
    return total
