"""A backend and a clock that tests control: every supervisor path in milliseconds.

:class:`FakeClock` replaces the supervisor's :class:`~tfdist.supervisor.loop.Clock`: when the
supervisor waits for an event, time jumps to the next thing scheduled (a task's scripted
exit, a line, an interrupt) or by the whole timeout, so backoff, hang, deadline and drain
timers run without sleeping. :class:`FakeBackend` plays tasks from a script:

    plan = {"worker-1": [(2.0, exit(1))],          # every attempt of worker-1 fails after 2 s
            ("worker-1", 1): [(1.0, exit(0))]}    # ... except attempt 1, which succeeds
    backend = FakeBackend(job, clock, plan)

A task without a script runs until it is stopped. Stopping takes no time, unless the task
is in ``ignores_sigterm``: then it lasts the whole grace and dies of SIGKILL.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdist.backends.base import Active, Backend, Event, Exited, Output, Progress, Started
from tfdist.cluster import Task, TaskId, needs_address
from tfdist.jobspec.model import JobSpec
from tfdist.states import JobState
from tfdist.supervisor.logs import TaskLogs
from tfdist.supervisor.loop import Clock, Supervisor
from tfdist.supervisor.result import JobResult


class Stuck(AssertionError):
    """The supervisor waits forever and nothing is scheduled: a real job would hang."""


class FakeClock(Clock):
    """Monotonic and wall time that move only when the supervisor waits."""

    EPOCH = 1_700_000_000.0

    def __init__(self, limit: float = 10_000.0) -> None:
        self.now = 0.0
        self.limit = limit  # fake seconds; a run that goes past it is a bug in the test
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self.EPOCH + self.now

    def monotonic(self) -> float:
        return self.now

    def schedule(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._due, (self.now + delay, next(self._seq), action))

    def advance(self, seconds: float) -> None:
        """Let time pass (a blocking stop), running what falls due meanwhile."""
        end = self.now + seconds
        while self._due and self._due[0][0] <= end:
            due, _, action = heapq.heappop(self._due)
            self.now = max(self.now, due)
            action()
        self.now = end

    def wait(self, events: queue.Queue[Event], timeout: float | None) -> Event:
        while True:
            try:
                return events.get_nowait()
            except queue.Empty:
                pass
            if self.now > self.limit:
                raise Stuck(f"fake time passed {self.limit:g}s")
            horizon = float("inf") if timeout is None else self.now + timeout
            if self._due and self._due[0][0] <= horizon:
                due, _, action = heapq.heappop(self._due)
                self.now = max(self.now, due)
                action()
                continue
            if timeout is None:
                raise Stuck("the supervisor waits with no timer and nothing scheduled")
            self.now = horizon
            raise queue.Empty


@dataclass(frozen=True)
class Step:
    kind: str  # exit | line | progress | active
    value: Any


def exit(code: int) -> Step:  # noqa: A001 - reads as the script says
    return Step("exit", code)


def line(text: str) -> Step:
    return Step("line", text)


def progress(**data: Any) -> Step:
    return Step("progress", data)


def active() -> Step:
    return Step("active", None)


class FakeBackend(Backend):
    """Tasks that do what the script says, on the fake clock; records what it was asked."""

    name = "fake"

    def __init__(self, job: JobSpec, clock: FakeClock, plan: dict[Any, list[tuple[float, Step]]] | None = None,
                 *, ignores_sigterm: tuple[str, ...] = ()) -> None:
        super().__init__(job)
        self.clock = clock
        self.plan = plan or {}
        self.ignores_sigterm = set(ignores_sigterm)
        self.running: dict[str, int] = {}  # task -> attempt
        self.starts: list[tuple[str, int, float]] = []  # (task, attempt, fake time)
        self.stops: list[tuple[tuple[str, ...], float, float]] = []  # (tasks, grace, fake time)
        self.envs: dict[tuple[str, int], dict[str, str]] = {}
        self.closed = False
        self.outcome: tuple[JobState, str, bool] | None = None  # what job_ended() was told

    def reserve(self, tasks: list[TaskId]) -> dict[str, str]:
        return {t.name: f"127.0.0.1:{20000 + i}" for i, t in enumerate(tasks) if needs_address(t)}

    def start(self, task: Task, attempt: int) -> None:
        name = task.name
        self.running[name] = attempt
        self.starts.append((name, attempt, self.clock.now))
        self.envs[(name, attempt)] = dict(task.env)
        self.events.put(Started(name, attempt, self.clock.time(), 1000 + len(self.starts), "fakehost"))
        for delay, step in self.plan.get((name, attempt), self.plan.get(name, [])):
            self.clock.schedule(delay, lambda s=step: self._play(name, attempt, s))

    def _play(self, name: str, attempt: int, step: Step) -> None:
        if self.running.get(name) != attempt:
            return  # that attempt was stopped already
        now = self.clock.time()
        if step.kind == "exit":
            del self.running[name]
            self.events.put(Exited(name, attempt, now, step.value))
        elif step.kind == "line":
            self.events.put(Output(name, attempt, now, step.value))
        elif step.kind == "progress":
            self.events.put(Progress(name, attempt, now, step.value))
        else:
            self.events.put(Active(name, attempt, now))

    def stop(self, names: list[str], grace: float) -> None:
        live = [n for n in names if n in self.running]
        self.stops.append((tuple(names), grace, self.clock.now))
        stubborn = [n for n in live if n in self.ignores_sigterm]
        for name in live:
            if name not in stubborn:
                self.events.put(Exited(name, self.running.pop(name), self.clock.time(), -signal.SIGTERM))
        if stubborn:
            self.clock.advance(grace)
            for name in stubborn:
                if name in self.running:
                    self.events.put(Exited(name, self.running.pop(name), self.clock.time(), -signal.SIGKILL))

    def job_ended(self, state: JobState, why: str) -> None:
        self.outcome = (state, why, self.closed)  # closed: whether close() came first

    def close(self) -> None:
        self.closed = True

    # -- what tests read ---------------------------------------------------------------------

    def attempts(self, name: str) -> list[int]:
        return [a for n, a, _ in self.starts if n == name]

    def start_times(self, name: str) -> list[float]:
        return [t for n, _, t in self.starts if n == name]


def run_fake(job: JobSpec, tmp_path: Path, plan: dict[Any, list[tuple[float, Step]]] | None = None,
             **kwargs: Any) -> tuple[JobResult, FakeBackend, Supervisor]:
    """Run ``job`` to its end on a FakeBackend; returns the result, backend and supervisor."""
    clock = FakeClock()
    backend = FakeBackend(job, clock, plan, **kwargs)
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    backend.attach(run_dir)
    sup = Supervisor(job, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), clock=clock)
    return sup.run(), backend, sup
