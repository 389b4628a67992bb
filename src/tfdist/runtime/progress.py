"""Progress reports to the launcher: one line on stdout per report.

stdout is the one channel every backend already streams (local pipes, pod logs, Ray
actor output), so a report is a line ``TFDIST_PROGRESS {json}`` that the launcher picks
out of a task's output. Values are made JSON-safe here (numpy and TF scalars become
floats) so a report never crashes training.

Three kinds of report: an epoch report (``epoch``: epochs completed) at every epoch end,
and, within epochs, a step report (``step`` and rates, no ``epoch`` key, so readers that
count epoch reports are not misled) at most as often as a :class:`Throttle` allows, by
default once a second: a task cannot flood its launcher, and a step report that reads a
tensor makes the host wait for the device once a second, not once a step; and marks
(:func:`mark`, a ``mark`` key) for the goodput breakdown: where training begins (the
restored step), and how long a checkpoint save or an evaluation blocked it. A mark is one
line per event the task already waits for (a save, a restore), never one per step.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tfdist.contract import MARK, PROGRESS_PREFIX


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
    return PROGRESS_PREFIX + json.dumps(data, separators=(",", ":"), sort_keys=False)


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return value


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


def report_step(rate: dict[str, float], step: int, batch_size: int | None, loss: Any,
                **fields: Any) -> str:
    """A step report (``final: false``) from :meth:`Throttle.due`'s rate; examples per second
    follow from the batch size when it is known."""
    per_sec = rate.get("steps_per_sec")
    examples = per_sec * batch_size if per_sec and batch_size else None
    return report(step=step, **fields, loss=loss, steps_per_sec=per_sec, examples_per_sec=examples,
                  final=False)


def mark(kind: str, *, step: int | None = None, seconds: float | None = None,
         stream: TextIO | None = None) -> str:
    """A goodput mark (``tfdist.contract.MARK_*``): ``begin`` with the step training starts from,
    ``checkpoint`` with the step saved and the seconds the save took, ``eval`` with seconds."""
    return report(stream, **{MARK: kind}, step=step, seconds=seconds)


#: Default seconds between step reports of one task.
EVERY_SECONDS = 1.0


class Throttle:
    """Says when a step report is due: every ``every_steps`` steps or every ``every_seconds``
    seconds, whichever comes first (None turns either off; both None: never).

    :meth:`due` costs a clock read and two comparisons: it is called after every step.
    """

    def __init__(self, every_seconds: float | None = EVERY_SECONDS, every_steps: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_seconds = every_seconds or None  # 0 turns it off too
        self.every_steps = every_steps or None
        self.clock = clock
        self.restart(0)

    @property
    def enabled(self) -> bool:
        return bool(self.every_seconds) or bool(self.every_steps)

    def restart(self, step: int) -> None:
        """Count from ``step`` now (at the start of training and of each epoch)."""
        self.step, self.time = step, self.clock()

    def due(self, step: int) -> dict[str, float] | None:
        """None, or when a report is due the rate since the last one (``steps_per_sec``),
        counting from now."""
        now = self.clock()
        by_time = self.every_seconds is not None and now - self.time >= self.every_seconds
        by_steps = self.every_steps is not None and step - self.step >= self.every_steps
        if not (by_time or by_steps):
            return None
        rate = (step - self.step) / (now - self.time) if now > self.time else None
        self.restart(step)
        return {"steps_per_sec": rate} if rate is not None else {}
