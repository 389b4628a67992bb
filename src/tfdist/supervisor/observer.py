"""What the supervisor tells the outside world while a job runs: typed, no-op-by-default hooks.

Observers (the job store's recorder, the live view, TensorBoard) never see the Supervisor:
every hook gets frozen statuses (:class:`~tfdist.supervisor.status.TaskStatus`), so an
observer that keeps them (the live view reads them from rich's refresh thread) can never see
a half-updated task or change one. An observer overrides only the hooks it needs;
:class:`Observers` fans out to several and drops one that raises, so a broken observer never
breaks the job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tfdist.errors import warn
from tfdist.states import PhaseState
from tfdist.supervisor.result import JobResult
from tfdist.supervisor.status import TaskStatus

if TYPE_CHECKING:
    from tfdist.backends.base import Usage


@dataclass(frozen=True)
class JobSnapshot:
    """The job-level facts an observer may show: name, run directory, restart budget, and the
    supervisor's phase (see :mod:`tfdist.supervisor.phase`)."""

    name: str
    run_dir: str
    started_at: float
    restarts_used: int
    restart_budget: int
    phase: PhaseState = PhaseState.STARTING


class Observer:
    """No-op hooks; subclasses override what they need. Hooks must be quick: they run on the
    supervisor's thread between two events."""

    def on_start(self, job: JobSnapshot, tasks: tuple[TaskStatus, ...]) -> None:
        """Before the first task starts, with every task (all pending)."""

    def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
        """A task changed state (``task.state``) at wall-clock time ``when``."""

    def on_phase(self, job: JobSnapshot, when: float) -> None:
        """The job entered a new phase (``job.phase``) at wall-clock time ``when``."""

    def on_launched(self, job: JobSnapshot) -> None:
        """Every task of the first round has been started (or failed to start), once: work
        that must not delay the tasks belongs here (see :class:`Deferred`)."""

    def on_progress(self, job: JobSnapshot, task: TaskStatus, when: float,
                    data: Mapping[str, Any]) -> None:
        """A task sent a progress report (``data``, also in ``task.progress``)."""

    def on_usage(self, job: JobSnapshot, task: TaskStatus, usage: Usage) -> None:
        """A sample of what the task's processes use (CPU, memory), every few seconds."""

    def on_goodput(self, job: JobSnapshot, data: Mapping[str, Any]) -> None:
        """The goodput of the job so far (:func:`~tfdist.supervisor.goodput.so_far`), every
        few seconds while it runs; the end's is in ``on_finish``'s result."""

    def on_finish(self, job: JobSnapshot, result: JobResult) -> None:
        """The job ended; ``result`` is what ``summary.json`` holds."""


class Observers(Observer):
    """Several observers as one. One that raises is dropped with a one-line warning; the
    ones that are context managers (live display, TensorBoard) are entered with this one."""

    def __init__(self, *observers: Observer | None) -> None:
        self.observers: list[Observer] = [o for o in observers if o is not None]
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Observers:
        for obs in self.observers:
            if hasattr(obs, "__enter__"):
                self._stack.enter_context(obs)  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _call(self, hook: str, *args: Any) -> None:
        for obs in list(self.observers):
            try:
                getattr(obs, hook)(*args)
            except Exception as err:  # an observer must never break the job
                self.observers.remove(obs)
                warn(f"{type(obs).__name__} stopped: {err}")

    def on_start(self, job: JobSnapshot, tasks: tuple[TaskStatus, ...]) -> None:
        self._call("on_start", job, tasks)

    def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
        self._call("on_transition", job, task, when)

    def on_phase(self, job: JobSnapshot, when: float) -> None:
        self._call("on_phase", job, when)

    def on_launched(self, job: JobSnapshot) -> None:
        self._call("on_launched", job)

    def on_progress(self, job: JobSnapshot, task: TaskStatus, when: float,
                    data: Mapping[str, Any]) -> None:
        self._call("on_progress", job, task, when, data)

    def on_usage(self, job: JobSnapshot, task: TaskStatus, usage: Usage) -> None:
        self._call("on_usage", job, task, usage)

    def on_goodput(self, job: JobSnapshot, data: Mapping[str, Any]) -> None:
        self._call("on_goodput", job, data)

    def on_finish(self, job: JobSnapshot, result: JobResult) -> None:
        self._call("on_finish", job, result)


Made = TypeVar("Made", bound=Observer)


class Deferred(Observer, Generic[Made]):
    """An observer made by ``make`` only when the first tasks have been started
    (:meth:`on_launched`), or earlier if the job ends or fails before that; the calls it
    missed are kept and replayed to it in order, so it sees the whole job.

    Why: whatever happens before the first task starts is added to every job's run time.
    The job store's record (importing sqlite3, opening the store, starting its writer) and
    ``job.yaml`` (importing PyYAML) are ~10 ms that tasks need not wait for; made after the
    start, they run while the tasks start up. ``make`` may return None (nothing to tell).
    """

    def __init__(self, make: Callable[[], Made | None]) -> None:
        self._make: Callable[[], Made | None] | None = make
        self._missed: list[tuple[str, tuple[Any, ...]]] = []
        self.target: Made | None = None

    def made(self) -> Made | None:
        """The observer, made now if it was not yet (then told what it missed). A make cut
        short (Ctrl-C while the store opens) is tried again at the next call: the end of
        the job calls this with signals held, so the record is still made."""
        if self._make is not None:
            self.target = self._make()
            self._make = None
            missed, self._missed = self._missed, []
            for hook, args in missed if self.target is not None else ():
                getattr(self.target, hook)(*args)
        return self.target

    def _pass(self, hook: str, *args: Any) -> None:
        if self._make is not None:
            self._missed.append((hook, args))
        elif self.target is not None:
            getattr(self.target, hook)(*args)

    def on_start(self, job: JobSnapshot, tasks: tuple[TaskStatus, ...]) -> None:
        self._pass("on_start", job, tasks)

    def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
        self._pass("on_transition", job, task, when)

    def on_phase(self, job: JobSnapshot, when: float) -> None:
        self._pass("on_phase", job, when)

    def on_launched(self, job: JobSnapshot) -> None:
        self.made()
        self._pass("on_launched", job)

    def on_progress(self, job: JobSnapshot, task: TaskStatus, when: float,
                    data: Mapping[str, Any]) -> None:
        self._pass("on_progress", job, task, when, data)

    def on_usage(self, job: JobSnapshot, task: TaskStatus, usage: Usage) -> None:
        self._pass("on_usage", job, task, usage)

    def on_goodput(self, job: JobSnapshot, data: Mapping[str, Any]) -> None:
        self._pass("on_goodput", job, data)

    def on_finish(self, job: JobSnapshot, result: JobResult) -> None:
        self.made()
        self._pass("on_finish", job, result)
