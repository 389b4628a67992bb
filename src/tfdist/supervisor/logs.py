"""Per-task log files and the prefixed live console.

Every backend reports output as events; this module writes them to
``<run_dir>/logs/<task>.log`` (kept after the job, whatever the backend) and, unless quiet,
to the console as ``[worker-1] line``, less what :mod:`.output` folds away: TensorFlow's
start-up lines and each task's Keras progress bars (the job's progress is one ``tfdist:``
line or the live table, from the tasks' progress reports). It also keeps the last lines of
each task for the root-cause report.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import time
from pathlib import Path
from typing import IO

from tfdist.errors import warn
from tfdist.supervisor.output import StartupFold, keras_progress
from tfdist.supervisor.runfiles import Appender

TAIL_LINES = 20
_COLORS = (36, 33, 35, 32, 34, 91, 96, 93, 95, 92)


class TaskLogs:
    """Log files, console echo and a tail buffer for each task."""

    def __init__(self, run_dir: Path, *, quiet: bool = False, stream: IO[str] | None = None,
                 notes: bool | None = None, fold: bool = True):
        """``notes``: tfdist's own lines (a task failed, restarting) even when ``quiet``, each
        with the time (a detached job's ``supervisor.log``); default: unless quiet. ``fold``:
        TensorFlow's start-up lines are not echoed (:class:`~.output.StartupFold`; the log
        file keeps every line), nor Keras's progress bars (:func:`~.output.keras_progress`)
        but the reference task's while it sends no progress report of tfdist's (a script
        without ``tfdist.runtime``: the bar's last state, once an epoch, is then the job's
        progress); ``tfdist run --verbose`` turns it off."""
        self.dir = run_dir / "logs"
        with contextlib.suppress(OSError):  # a full disk: every line is then dropped and counted
            self.dir.mkdir(parents=True, exist_ok=True)
        self.quiet = quiet
        self.notes = not quiet if notes is None else notes
        self.stream = stream or sys.stdout
        self.color = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._files: dict[str, Appender] = {}
        self._tails: dict[str, collections.deque[str]] = {}
        self._prefix: dict[str, str] = {}
        self.fold = fold
        self._folds: dict[str, StartupFold] = {}
        self._folded_note = False
        self._bars_note = False
        self._width = 0
        self.reference: str | None = None
        self._reporting: set[str] = set()

    def register(self, names: list[str], reference: str | None = None) -> None:
        """The tasks' names (for the prefixes) and the job's reference task (see ``fold``)."""
        self.reference = reference
        self._width = max(len(n) for n in names) if names else 0
        for i, name in enumerate(names):
            label = f"[{name}]".ljust(self._width + 2)
            if self.color:
                label = f"\x1b[{_COLORS[i % len(_COLORS)]}m{label}\x1b[0m"
            self._prefix[name] = label + " "

    def _file(self, name: str) -> Appender:
        handle = self._files.get(name)
        if handle is None:
            handle = Appender(self.dir / f"{name}.log", self.warn)
            self._files[name] = handle
        return handle

    def warn(self, text: str) -> None:
        """A problem of tfdist's own that the user must see even with --quiet."""
        warn(text, sys.stderr if self.quiet else self.stream)

    def dropped(self) -> dict[str, int]:
        """Lines that could not be written, by log file (``logs/worker-1.log``)."""
        return {f"logs/{name}.log": f.dropped for name, f in self._files.items() if f.dropped}

    def attempt(self, name: str, attempt: int) -> None:
        """Mark a new attempt in the task's log file; the tail starts afresh."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._file(name).write(f"--- tfdist: {name} attempt {attempt} started {stamp} ---\n")
        self._tails[name] = collections.deque(maxlen=TAIL_LINES)
        self._folds[name] = StartupFold()  # each attempt starts TensorFlow again

    def line(self, name: str, text: str, *, echo: bool = True) -> None:
        self._file(name).write(text + "\n")
        self._tails.setdefault(name, collections.deque(maxlen=TAIL_LINES)).append(text)
        if echo and not self.quiet and self.fold and self._folds.setdefault(name, StartupFold()).noise(text):
            if not self._folded_note:
                self._folded_note = True
                self.note("TensorFlow's start-up messages are folded away (each task's log keeps them; "
                          "--verbose shows them)")
            return
        if echo and not self.quiet and self.fold:
            bar = keras_progress(text)
            if bar is not None:
                self._echo(name, self._unfolded(name, bar.last if bar.done else "", bar.rest))
                return
        if echo and not self.quiet:
            self._echo(name, [text])

    def reported(self, name: str) -> None:
        """Task ``name`` sends progress reports of tfdist's: its Keras bars are folded away."""
        self._reporting.add(name)

    def _unfolded(self, name: str, last: str, rest: tuple[str, ...]) -> list[str]:
        """What is left to show of a line with Keras's progress: the task's own text in it,
        and the bar's state at an epoch's end (``last``) for the reference task when it sends
        no reports."""
        shown = [last] if last and name == self.reference and name not in self._reporting else []
        if not self._bars_note and not shown:
            self._bars_note = True
            self.note("Keras progress bars are folded away: tfdist shows the job's progress as one line "
                      "(each task's log keeps the bars; --verbose shows them)")
        return [*shown, *rest]

    def _echo(self, name: str, lines: list[str]) -> None:
        prefix = self._prefix.get(name, f"[{name}] ")
        for text in lines:
            self.stream.write(prefix + text + "\n")
        if lines:
            self.stream.flush()

    def note(self, text: str) -> None:
        """A line from tfdist itself (restarts, teardown), shown unless quiet (see ``notes``)."""
        if self.notes:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S ") if self.quiet else ""
            self.stream.write(f"{stamp}tfdist: {text}\n")
            self.stream.flush()

    def tail(self, name: str) -> list[str]:
        return list(self._tails.get(name, ()))

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()  # kept: their counts of dropped lines go into the summary
