"""A number of seconds a user gave (a flag, an environment variable): the one check of it.

A value that is no finite number from 0 to the setting's maximum is a typo (``1e300``,
``nan``, ``-5``, ``30s``); each caller says so in its own one-line message naming its field.
Standard library only.
"""

from __future__ import annotations

import math


def seconds(value: object, maximum: float) -> float | None:
    """``value`` as seconds from 0 to ``maximum``, or None when it is not one."""
    try:
        number = float(value)  # type: ignore[arg-type]  # str, int or float; anything else is None
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and 0 <= number <= maximum else None
