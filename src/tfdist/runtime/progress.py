"""Progress reports to the launcher: one line on stdout per report.

stdout is the one channel every backend already streams (local pipes, pod logs, Ray
actor output), so a report is a line ``TFDIST_PROGRESS {json}`` that the launcher picks
out of a task's output. Values are made JSON-safe here (numpy and TF scalars become
floats) so a report never crashes training.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, TextIO

from tfdist import contract

PREFIX = contract.PROGRESS_PREFIX


def _plain(value: Any) -> Any:
    """A JSON-safe copy: scalars of any array library become int/float, NaN becomes None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    if hasattr(value, "numpy"):  # eager tensors
        value = value.numpy()
    if hasattr(value, "item"):  # numpy scalars and 0-d arrays
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bool | int | str):
        return value
    return str(value)


def format_line(**fields: Any) -> str:
    """The report line (without newline); rounding keeps lines short."""
    data = {k: _round(_plain(v)) for k, v in fields.items() if v is not None}
    return PREFIX + json.dumps(data, separators=(",", ":"), sort_keys=False)


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return value


def parse_line(line: str) -> dict[str, Any] | None:
    """The fields of a report line, or None if the line is not a report."""
    if not line.startswith(PREFIX):
        return None
    try:
        data = json.loads(line[len(PREFIX) :])
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def report(stream: TextIO | None = None, **fields: Any) -> str:
    """Print one progress line and flush, so the launcher sees it at once.

    Typical fields: epoch, epochs, step, loss, metrics (dict), examples_per_sec, final.
    The final report of training carries ``final=True`` and the last metrics.
    """
    line = format_line(**fields)
    out = stream or sys.stdout
    out.write(line + "\n")
    out.flush()
    return line
