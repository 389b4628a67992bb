"""The live view of ``tfdist run``: a table of tasks under the scrolling task output.

On a terminal, a rich ``Live`` display shows each task's state, epoch/step, examples per
second and loss, a progress bar for the job, and marks a straggler
(:mod:`tfdist.supervisor.stragglers`: under 70% of its peers' median rate). Piped, the same
news comes as plain lines (``tfdist: worker-0 epoch 2/3 step 20 loss 1.0000 ... (stragglers:
worker-1)``), one per progress report of the job's reference task.

:func:`build_view` is a pure function of task statuses (no clock, no I/O) so it can be
tested as a snapshot at a fixed width; :class:`LiveView` and :class:`PlainProgress` are the
supervisor observers that feed it.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

from tfdist.cli.format import progress_text
from tfdist.contract import MARK
from tfdist.states import TaskState, budget_text
from tfdist.supervisor.observer import JobSnapshot, Observer, Observers
from tfdist.supervisor.status import TaskStatus
from tfdist.supervisor.stragglers import RateWindow, stragglers

if TYPE_CHECKING:  # rich is imported where it draws: piped output never needs it, and a
    # terminal's view starts once the tasks have (its import is ~18 ms)
    from rich.console import Console, RenderableType
    from rich.table import Table

#: Above this many tasks the live view shows one row per role.
MAX_LIVE_ROWS = 30
_STATE_STYLE = {"running": "cyan", "succeeded": "green", "failed": "red", "stopping": "yellow",
                "stopped": "yellow", "pending": "dim"}


def training(statuses: Mapping[str, TaskStatus]) -> set[str]:
    """The running training tasks (chief, workers): the ones a straggler is among."""
    return {n for n, s in statuses.items() if s.role in ("chief", "worker") and s.state.value == "running"}


def step_rates(statuses: Mapping[str, TaskStatus], derived: Mapping[str, float] | None = None
               ) -> dict[str, float]:
    """Steps per second of each running training task: the caller's (recent reports'),
    else the one in its last progress."""
    rates: dict[str, float] = {}
    for name in training(statuses):
        rate = (derived or {}).get(name)
        if not isinstance(rate, int | float):
            rate = statuses[name].progress.get("steps_per_sec")
        if isinstance(rate, int | float):
            rates[name] = float(rate)
    return rates


def job_fraction(statuses: Mapping[str, TaskStatus]) -> float | None:
    """How far training is: the mean of epoch/epochs over training tasks that report it."""
    parts = []
    for s in statuses.values():
        if s.role not in ("chief", "worker"):
            continue
        p = s.progress
        if p.get("final"):
            parts.append(1.0)
        elif isinstance(p.get("epoch"), int | float) and p.get("epochs"):
            parts.append(min(1.0, p["epoch"] / p["epochs"]))
    return sum(parts) / len(parts) if parts else None


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _task_table(statuses: Mapping[str, TaskStatus], rates: Mapping[str, float], slow: set[str]) -> Table:
    """One row per task."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, show_edge=False, expand=False)
    for col, justify in (("task", "left"), ("state", "left"), ("epoch", "right"), ("step", "right"),
                         ("steps/s", "right"), ("examples/s", "right"), ("loss", "right"),
                         ("restarts", "right"), ("", "left")):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for name, s in statuses.items():
        p = s.progress
        epoch = "-"
        if isinstance(p.get("epoch"), int):
            epoch = f"{p['epoch']}/{p['epochs']}" if p.get("epochs") else str(p["epoch"])
        state = s.state.value
        table.add_row(
            name,
            Text(state, style=_STATE_STYLE.get(state, "")),
            epoch,
            _num(p.get("step"), "d"),
            _num(rates.get(name), ".1f"),
            _num(p.get("examples_per_sec"), ".0f"),
            _num(p.get("loss"), ".4f"),
            str(s.restarts),
            Text("straggler", style="bold red") if name in slow else "",
        )
    return table


def _role_table(statuses: Mapping[str, TaskStatus], rates: Mapping[str, float], slow: set[str]) -> Table:
    """One row per role (a large job): tasks by state, median step rate, the stragglers."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, show_edge=False, expand=False)
    for col in ("role", "tasks", "running", "done", "failed", "steps/s (median)", "restarts", "stragglers"):
        table.add_column(col, no_wrap=True)
    roles: dict[str, list[TaskStatus]] = {}
    for s in statuses.values():
        roles.setdefault(s.role, []).append(s)
    for role, group in roles.items():
        states = Counter(s.state for s in group)
        known = [rates[s.name] for s in group if s.name in rates]
        behind = sorted(s.name for s in group if s.name in slow)
        table.add_row(role, str(len(group)), str(states[TaskState.RUNNING]), str(states[TaskState.SUCCEEDED]),
                      str(states[TaskState.FAILED]), _num(statistics.median(known), ".1f") if known else "-",
                      str(sum(s.restarts for s in group)),
                      Text(", ".join(behind[:5]) + (" ..." if len(behind) > 5 else ""), style="bold red"))
    return table


def build_view(
    statuses: Mapping[str, TaskStatus],
    *,
    job_name: str,
    elapsed: float,
    rates: Mapping[str, float] | None = None,
    restarts: tuple[int, int] | None = None,
    judged: Mapping[str, float] | None = None,
) -> RenderableType:
    """The live view as a rich renderable: header, task table, job progress bar.

    ``rates`` are recent steps per second, ``judged`` the rates stragglers are judged by
    (:class:`~tfdist.supervisor.stragglers.RateWindow`; default the steps per second);
    ``restarts`` is (used, budget) of the job's restart budget, shown in the header."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    rates = step_rates(statuses, rates)
    in_training = training(statuses)
    slow = stragglers({n: r for n, r in judged.items() if n in in_training} if judged is not None else rates)
    table = (_role_table(statuses, rates, slow) if len(statuses) > MAX_LIVE_ROWS
             else _task_table(statuses, rates, slow))
    fraction = job_fraction(statuses)
    running = sum(1 for s in statuses.values() if s.state.value == "running")
    header = Text.assemble(("job ", "bold"), job_name,
                           f"  {running}/{len(statuses)} tasks running  {elapsed:.0f}s")
    if restarts is not None:
        header.append(f"  restarts {budget_text(*restarts)}")
    bar = Table.grid(padding=(0, 1))
    bar.add_column(no_wrap=True)
    bar.add_column(width=40)
    bar.add_column(no_wrap=True)
    bar.add_row("progress", ProgressBar(total=1.0, completed=fraction or 0.0, width=40),
                f"{fraction * 100:.0f}%" if fraction is not None else "-")
    return Group(header, table, bar)


def plain_line(status: TaskStatus, straggler: bool = False) -> str:
    """One progress report as a plain line (no colour, no cursor moves)."""
    return f"{status.name} {progress_text(status.progress)}" + (" (straggler)" if straggler else "")


class LiveView(Observer):
    """Observer that keeps a rich Live table on the terminal while the job runs.

    It keeps its own copy of every task's latest snapshot: rich redraws from its own thread,
    which must never read the supervisor's state while the supervisor changes it. The
    display starts once the first tasks have started (:meth:`on_launched`), so importing
    rich never delays them; it is a context manager only to stop the display at the end."""

    def __init__(self, console: Console | None = None, refresh_per_second: float = 4) -> None:
        self.console = console
        self.tasks: dict[str, TaskStatus] = {}
        self.job: JobSnapshot | None = None
        self.tracker = RateWindow()
        self._lock = threading.Lock()
        self._live: Any = None
        self._closed = False
        self.refresh_per_second = refresh_per_second

    def render(self) -> RenderableType:
        with self._lock:
            tasks, job = dict(self.tasks), self.job
            rates, judged = self.tracker.steps_per_sec(), self.tracker.judged(training(tasks))
        if job is None:
            from rich.text import Text

            return Text("starting")
        return build_view(tasks, job_name=job.name, elapsed=time.time() - job.started_at,
                          rates=rates, restarts=(job.restarts_used, job.restart_budget), judged=judged)

    def __enter__(self) -> LiveView:
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        if self._live is not None:
            self._live.stop()
            self._live = None

    def on_launched(self, job: JobSnapshot) -> None:
        if self._closed or self._live is not None:
            return
        from rich.console import Console
        from rich.live import Live

        self.console = self.console or Console()
        self._live = Live(console=self.console, get_renderable=self.render,
                          refresh_per_second=self.refresh_per_second,
                          redirect_stdout=True, redirect_stderr=True)
        self._live.start()

    def on_start(self, job: JobSnapshot, tasks: tuple[TaskStatus, ...]) -> None:
        with self._lock:
            self.job = job
            self.tasks = {t.name: t for t in tasks}

    def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
        with self._lock:
            self.job = job
            self.tasks[task.name] = task

    def on_progress(self, job: JobSnapshot, task: TaskStatus, when: float,
                    data: Mapping[str, Any]) -> None:
        with self._lock:
            self.job = job
            self.tasks[task.name] = task
            self.tracker.add(task.name, when, data)

    def on_finish(self, job: JobSnapshot, result: Any) -> None:
        if self._live is not None:
            self._live.refresh()


class PlainProgress(Observer):
    """Observer for piped output: one ``tfdist:`` line per progress report of the job's
    reference task (the chief, else worker-0: the one whose progress is the job's), with
    the stragglers among the others named; every task's reports count for those."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout
        self.tracker = RateWindow()
        self.tasks: dict[str, TaskStatus] = {}
        self.reference: str | None = None

    def on_start(self, job: JobSnapshot, tasks: tuple[TaskStatus, ...]) -> None:
        self.tasks = {t.name: t for t in tasks}
        names = [t.name for t in tasks]
        self.reference = next((n for n in ("chief-0", "worker-0") if n in names), None)

    def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
        self.tasks[task.name] = task

    def on_progress(self, job: JobSnapshot, task: TaskStatus, when: float,
                    data: Mapping[str, Any]) -> None:
        if MARK in data:  # nothing new to show: the task's progress did not change
            return
        self.tasks[task.name] = task
        self.tracker.add(task.name, when, data)
        if self.reference is not None and task.name != self.reference:
            return
        slow = stragglers(self.tracker.judged(training(self.tasks)))
        others = sorted(slow - {task.name})
        named = f" (stragglers: {', '.join(others[:5])}{' ...' if len(others) > 5 else ''})" if others else ""
        self.stream.write(f"tfdist: {plain_line(task, task.name in slow)}{named}\n")
        self.stream.flush()


def observer_for(
    *, quiet: bool, as_json: bool, tensorboard: bool = False, stream: IO[str] | None = None
) -> Observers | None:
    """The live table on a terminal, plain lines when piped, nothing when quiet; and
    TensorBoard when asked. A context manager (or None)."""
    stream = stream or sys.stdout
    view: Observer | None = None
    if not quiet:
        tty = not as_json and hasattr(stream, "isatty") and stream.isatty()
        view = LiveView() if tty else PlainProgress(stream)
    board = None
    if tensorboard:
        from tfdist.jobs.tensorboard import TensorBoardObserver

        board = TensorBoardObserver()
    return Observers(view, board) if view or board else None
