"""The job's phase as the supervisor runs it: one named state at a time, each with its data.

The supervisor's loop is in exactly one phase and steps from phase to phase; ``status``, the
dashboard and the job store read the same name (:class:`tfdist.states.PhaseState`)::

    starting --(every task running)--> running
    starting/running --(a failure, a restart decided)--> restarting
    restarting --(every restarted task started)--> starting
    starting/running/restarting --(success)--> draining --(all ended, or drain time over)--> ended
    any --(failure with no restart, deadline, interrupt, error)--> ended

A phase that waits for something holds what it waits for (:class:`Restarting` the tasks
due and when, :class:`Draining` its deadline), so no variable of the loop is "set only in
some phase". The transitions are pure functions of the phase, the task statuses and
``now`` (no I/O, no clock), tested one by one in tests/supervisor/test_phase.py; the loop
does the I/O they ask for (starting and stopping tasks, telling observers). Anchor: Ray
Train v2's controller states (``controller/state.py``), each saying whether it is terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from tfdist.jobspec.model import JobSpec
from tfdist.states import ENDED_TASK_STATES, JobState, PhaseState, TaskState
from tfdist.supervisor.status import TaskStatus


@dataclass(frozen=True)
class Starting:
    """Tasks have been started (the first round, or a restart's) and not all run yet: a gang
    being scheduled, images pulled, interpreters starting."""

    state: ClassVar[PhaseState] = PhaseState.STARTING
    terminal: ClassVar[bool] = False


@dataclass(frozen=True)
class Running:
    """Every task that has not ended is running; training goes on."""

    state: ClassVar[PhaseState] = PhaseState.RUNNING
    terminal: ClassVar[bool] = False


@dataclass(frozen=True)
class Restarting:
    """Tasks stopped after a failure wait out their backoff to start again. Under parameter
    servers a worker restarts alone and training goes on meanwhile; under all-reduce the
    whole group waits."""

    state: ClassVar[PhaseState] = PhaseState.RESTARTING
    terminal: ClassVar[bool] = False
    #: Task -> the monotonic time to start it again.
    due: Mapping[str, float] = field(default_factory=dict)
    #: Counted restart decisions none of whose tasks has started yet: if training ends first
    #: they are given back, so the record counts restarts that ran.
    unstarted: tuple[frozenset[str], ...] = ()


@dataclass(frozen=True)
class Draining:
    """Training succeeded: the tasks still finishing (an evaluator's last pass, a worker's
    last save) get until ``until`` (monotonic), then they are stopped."""

    state: ClassVar[PhaseState] = PhaseState.DRAINING
    terminal: ClassVar[bool] = False
    until: float


@dataclass(frozen=True)
class Ended:
    """The job is over; ``outcome`` is how it ended."""

    state: ClassVar[PhaseState] = PhaseState.ENDED
    terminal: ClassVar[bool] = True
    outcome: JobState


Phase = Starting | Running | Restarting | Draining | Ended
#: The phases in which the loop watches for failures, hangs, the deadline and success.
Active = Starting | Running | Restarting


def settle(statuses: Mapping[str, TaskStatus], due: Mapping[str, float] | None = None,
           unstarted: tuple[frozenset[str], ...] = ()) -> Active:
    """The active phase the tasks are in: restarting while restarts wait to start (``due``),
    starting while a task that has not ended is still pending, else running."""
    if due:
        return Restarting(dict(due), unstarted)
    if any(s.state is TaskState.PENDING for s in statuses.values()):
        return Starting()
    return Running()


def restart(phase: Active, tasks: list[str], due: float, *, counted: bool) -> Restarting:
    """``phase`` with a restart of ``tasks`` decided, to start at ``due`` (monotonic);
    ``counted``: the decision spends training's budget (given back if it never starts)."""
    pending = dict(phase.due) if isinstance(phase, Restarting) else {}
    unstarted = phase.unstarted if isinstance(phase, Restarting) else ()
    pending.update(dict.fromkeys(tasks, due))
    if counted:
        unstarted = (*unstarted, frozenset(tasks))
    return Restarting(pending, unstarted)


def due_now(phase: Phase, statuses: Mapping[str, TaskStatus], now: float) -> list[str]:
    """The restarting tasks to start now: due, and their last attempt over, soonest first."""
    if not isinstance(phase, Restarting):
        return []
    return [name for name, at in sorted(phase.due.items(), key=lambda kv: kv[1])
            if at <= now and statuses[name].state in ENDED_TASK_STATES]


def started(phase: Restarting, name: str) -> Restarting:
    """``phase`` once task ``name`` was started again: no longer due, and no decision that
    includes it can be given back."""
    return Restarting({k: v for k, v in phase.due.items() if k != name},
                      tuple(d for d in phase.unstarted if name not in d))


def cancelled(phase: Phase) -> int:
    """Counted restarts that never started and are given back when training ends in ``phase``."""
    return len(phase.unstarted) if isinstance(phase, Restarting) else 0


def past_deadline(job: JobSpec, t0: float, now: float) -> bool:
    """Has the job run past ``deadline_seconds`` (``t0``: its start, monotonic)?"""
    return bool(job.deadline_seconds) and now - t0 >= (job.deadline_seconds or 0)


def drain(job: JobSpec, now: float) -> Draining:
    """The phase after success at ``now``: the tasks left get ``drain_seconds``."""
    return Draining(now + job.drain_seconds)


def drained(phase: Draining, statuses: Mapping[str, TaskStatus],
            now: float) -> tuple[Draining | Ended, list[str]]:
    """The next phase of a drain at ``now``, and the tasks to stop on the way: ended when every
    task has, or (stopping the rest) when the drain time is over."""
    remaining = [n for n, s in statuses.items() if s.state not in ENDED_TASK_STATES]
    if not remaining:
        return Ended(JobState.SUCCEEDED), []
    if now >= phase.until:
        return Ended(JobState.SUCCEEDED), remaining
    return phase, []


def timeout(phase: Phase, job: JobSpec, t0: float, now: float) -> float | None:
    """How long the loop may wait for the next event in ``phase``: until the next restart,
    the deadline, the drain's end, or the next hang check; None: only an event can change
    anything."""
    timers: list[float] = []
    if isinstance(phase, Restarting):
        timers += phase.due.values()
    if isinstance(phase, Draining):
        timers.append(phase.until)
    if job.deadline_seconds:
        timers.append(t0 + job.deadline_seconds)
    if job.hang_timeout_seconds:
        timers.append(now + min(1.0, job.hang_timeout_seconds / 4))
    return max(0.0, min(timers) - now) if timers else None
