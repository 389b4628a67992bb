"""Which training tasks are stragglers, from their progress reports (pure, no clock): the
terminal's live view, its piped lines and the dashboard's curves use this one rule.

A task is a straggler when its rate is under :data:`RATIO` of the median of its peers'
(relative: a job at 10 steps/s and one at 10,000 are judged alike; with two tasks each is
compared with the other, not with a median that includes itself). The 30 % gap is the floor
under which a difference is noise: a rate is measured over a second or an epoch, through a
pipe. Each task's rate is the median of its last :data:`WINDOW` ones, of the same kind for
every task: examples per second when every task reports them (what the user sees), else
steps per second; a step report's rate, not an epoch report's (which counts the epoch's
evaluation too) once a task sends step reports; derived from successive reports' steps
only for a task that reports no rate at all.
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Mapping
from typing import Any

from tfdist.contract import MARK

RATIO = 0.7
WINDOW = 3
KINDS = ("examples_per_sec", "steps_per_sec")


def stragglers(rates: Mapping[str, float], ratio: float = RATIO) -> set[str]:
    """Tasks whose rate is under ``ratio`` times the median of the others' (needs two rates)."""
    known = {n: r for n, r in rates.items() if isinstance(r, int | float) and r > 0}
    if len(known) < 2:
        return set()
    slow = set()
    for name, rate in known.items():
        peers = [r for n, r in known.items() if n != name]
        if rate < ratio * statistics.median(peers):
            slow.add(name)
    return slow


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class RateWindow:
    """Each task's recent rates, fed its progress reports in order (:meth:`add`)."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self._rates: dict[str, dict[str, collections.deque[float]]] = {}
        self._step_reports: set[str] = set()
        self._last: dict[str, tuple[float, float]] = {}  # task -> (time, step) of its last report

    def _kind(self, task: str, kind: str) -> collections.deque[float]:
        by_kind = self._rates.setdefault(task, {})
        return by_kind.setdefault(kind, collections.deque(maxlen=self.window))

    def add(self, task: str, when: float, data: Mapping[str, Any]) -> None:
        if MARK in data or data.get("final"):  # a goodput mark, the final metrics: no rate
            return
        epoch_report = data.get("epoch") is not None
        step = _number(data.get("step"))
        reported = {k: v for k in KINDS if (v := _number(data.get(k))) is not None and v > 0}
        if reported and not epoch_report and task not in self._step_reports:
            self._step_reports.add(task)  # from now on its step reports' rates only
            self._rates.pop(task, None)
        if reported and not (epoch_report and task in self._step_reports):
            for kind, value in reported.items():
                self._kind(task, kind).append(value)
        elif not reported and step is not None:
            prev = self._last.get(task)
            if prev is not None and when > prev[0] and step > prev[1]:
                self._kind(task, "derived").append((step - prev[1]) / (when - prev[0]))
        if step is not None:
            self._last[task] = (when, step)

    def steps_per_sec(self) -> dict[str, float]:
        """Each task's recent steps per second (reported, else derived)."""
        out = {}
        for task, by_kind in self._rates.items():
            samples = by_kind.get("steps_per_sec") or by_kind.get("derived")
            if samples:
                out[task] = statistics.median(samples)
        return out

    def judged(self, tasks: set[str] | None = None) -> dict[str, float]:
        """The rates stragglers are judged by, of one kind for all of ``tasks`` (default all)."""
        names = [t for t in self._rates if tasks is None or t in tasks]
        for kind in KINDS:
            if names and all(self._rates[t].get(kind) for t in names):
                return {t: statistics.median(self._rates[t][kind]) for t in names}
        return {t: r for t, r in self.steps_per_sec().items() if t in names}
