"""The supervisor: read events, ask the policy, act. It knows no backend details.

The loop blocks on the backend's event queue (no polling interval), wakes early only for
timers (restart backoff, drain, deadline, hang checks), and leaves every decision to pure
functions: what a failure, an exit or success means in :mod:`tfdist.supervisor.policy`, which
phase the job is in and goes to next in :mod:`tfdist.supervisor.phase`.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfdist import contract, runs
from tfdist.backends.base import Active, Backend, Event, Exited, Output, Progress, Started, Usage
from tfdist.cluster import Task, TaskId, cluster_map, make_task, task_ids
from tfdist.jobspec.model import JobSpec
from tfdist.states import ENDED_TASK_STATES, JobState, TaskState, describe_exit
from tfdist.supervisor import goodput, interrupts, policy, runfiles
from tfdist.supervisor import phase as phases
from tfdist.supervisor.logs import TaskLogs
from tfdist.supervisor.observer import JobSnapshot, Observer
from tfdist.supervisor.result import JobResult, RootCause
from tfdist.supervisor.runfiles import Appender
from tfdist.supervisor.status import TaskStatus

#: How often (seconds) a running job's goodput so far is computed and told to the observers:
#: the job store keeps it, so ``status`` and the dashboard show it live.
GOODPUT_EVERY = 10.0


class Clock:
    """Time as the supervisor sees it, and its one blocking wait. Tests pass a fake whose
    :meth:`wait` jumps time forward instead of sleeping (see tests/fakes.py), so every
    timer path (backoff, hang, deadline, drain) runs in milliseconds."""

    def time(self) -> float:
        """Wall clock, for records."""
        return time.time()

    def monotonic(self) -> float:
        """For timers."""
        return time.monotonic()

    def wait(self, events: queue.Queue[Event], timeout: float | None) -> Event:
        """The next event, waiting at most ``timeout`` seconds; raises queue.Empty."""
        return events.get(timeout=timeout)


class Supervisor:
    """Run one job on one backend until it succeeds, fails or is interrupted."""

    def __init__(
        self,
        job: JobSpec,
        backend: Backend,
        run_dir: Path,
        *,
        logs: TaskLogs | None = None,
        observer: Observer | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.job = job
        # Told of every transition, progress report and the result (job store, live view),
        # always with frozen snapshots; see supervisor/observer.py.
        self.observer = observer or Observer()
        self.clock = clock or Clock()
        self.backend = backend
        self.run_dir = run_dir
        self.logs = logs or TaskLogs(run_dir)
        # One frozen status per task, replaced at each change (see _update): what observers
        # are handed is never changed afterwards.
        self.statuses: dict[str, TaskStatus] = {
            t.name: TaskStatus(t.name, t.role, t.index) for t in task_ids(job)
        }
        #: Each task's last sign of life (output or progress), monotonic: for hang checks.
        self._activity: dict[str, float] = {}
        #: Tasks whose backend said the last exit cannot be retried (Exited.final).
        self._final: set[str] = set()
        self.tasks: dict[str, Task] = {}
        self.addresses: dict[str, str] = {}
        self._cluster: dict[str, list[str]] = {}  # the TF_CONFIG cluster map, fixed once reserved
        self.restarts_used = 0
        self.root_cause: RootCause | None = None
        #: Where the job is (see supervisor/phase.py); the restarts waiting to start and the
        #: drain's deadline live in it.
        self.phase: phases.Phase = phases.Starting()
        self._failures: list[str] = []  # tasks that failed since the last decision
        self._events_file = Appender(run_dir / runs.EVENTS, self.logs.warn)
        self._progress_file = Appender(run_dir / runs.PROGRESS, self.logs.warn)
        # the one record that must survive a full disk: its room is taken now
        runfiles.reserve(run_dir / runs.SUMMARY, 16384 + 400 * len(self.statuses))
        # What the goodput breakdown is computed from at the end: every transition (a few per
        # attempt) and the reference task's reports only (at most one a second, plus marks).
        self._reference = policy.success_task(job)
        self._timeline: list[goodput.GoodputEvent] = []
        self.started_at = self.clock.time()
        self._t0 = self.clock.monotonic()
        self._goodput_due = self._t0  # when the goodput so far is computed next

    def snapshot(self) -> JobSnapshot:
        return JobSnapshot(self.job.name, str(self.run_dir), self.started_at, self.restarts_used,
                           self.job.restart_budget, self.phase.state)

    def _enter(self, phase: phases.Phase) -> None:
        """The job is now in ``phase``; a new phase (by name) is recorded in the goodput
        timeline and told to the observers."""
        before, self.phase = self.phase.state, phase
        if phase.state is not before:
            now = self.clock.time()
            self._timeline.append(goodput.PhaseChange(now, phase.state))
            self.observer.on_phase(self.snapshot(), now)

    # -- the record ------------------------------------------------------------------

    def _update(self, name: str, **changes: Any) -> TaskStatus:
        """Task ``name``'s status with ``changes``: a new object, so one handed out never changes."""
        status = self.statuses[name] = dataclasses.replace(self.statuses[name], **changes)
        return status

    def _set(self, name: str, state: TaskState, extra: Mapping[str, Any] | None = None,
             **changes: Any) -> TaskStatus:
        """A transition: task ``name`` is now in ``state`` (with ``changes``, in the same new
        status), recorded in events.jsonl (with ``extra``) and told to the observers."""
        now = self.clock.time()
        status = self._update(name, state=state, updated_at=now, **changes)
        row = {
            "time": round(now, 3),
            "task": status.name,
            "attempt": status.attempt,
            "state": status.state.value,
            **(extra or {}),
        }
        self._events_file.write(json.dumps(row) + "\n")
        self._timeline.append(goodput.Transition(now, status.name, status.attempt, status.state))
        self.observer.on_transition(self.snapshot(), status, now)
        return status

    # -- starting and stopping -------------------------------------------------------

    def _start(self, name: str) -> None:
        status = self.statuses[name]
        task = make_task(
            self.job,
            TaskId(status.role, status.index),
            self._cluster,
            self.addresses,
            run_dir=str(self.run_dir),
            restart_count=status.restarts,
        )
        self.tasks[name] = task
        self._activity[name] = self.clock.monotonic()
        self.logs.attempt(name, status.attempt)
        self._set(name, TaskState.PENDING, exit_code=None, reason=None)
        with interrupts.held():  # a process created must be registered, or no stop finds it
            self.backend.start(task, status.attempt)

    def _stop(self, names: list[str], grace: float, reason: str) -> None:
        live = [n for n in names if self.statuses[n].state not in ENDED_TASK_STATES]
        for name in live:
            self._set(name, TaskState.STOPPING, {"reason": reason})
        if live:
            self.backend.stop(live, grace)

    # -- events ------------------------------------------------------------------------

    def _apply(self, ev: Event) -> None:
        status = self.statuses.get(ev.task)
        if status is None:
            return
        if isinstance(ev, Output | Active):
            if isinstance(ev, Output):
                self.logs.line(ev.task, ev.line)
            if ev.attempt == status.attempt:  # any output is a sign of life
                self._activity[ev.task] = self.clock.monotonic()
            return
        if ev.attempt != status.attempt:
            return  # a late event of an attempt already dealt with
        if isinstance(ev, Progress | Usage):
            self._report(ev, status)
        elif isinstance(ev, Started):
            started = {"pid": ev.pid, "host": ev.host, "started_at": ev.time, "ended_at": None}
            if ev.address:
                started["address"] = ev.address
            if status.state is TaskState.PENDING:
                self._set(ev.task, TaskState.RUNNING, {"pid": ev.pid}, **started)
            else:
                self._update(ev.task, **started)
        elif isinstance(ev, Exited):
            if status.state in ENDED_TASK_STATES:  # already judged (a hang we stopped)
                self._update(ev.task, exit_code=ev.exit_code)
                return
            state = policy.exit_state(status.role, ev.exit_code, status.state is TaskState.STOPPING)
            reason = status.reason or ev.reason
            status = self._set(ev.task, state, {"exit_code": ev.exit_code, "reason": reason},
                               exit_code=ev.exit_code, ended_at=ev.time, reason=reason)
            if ev.final:
                self._final.add(ev.task)
            else:
                self._final.discard(ev.task)
            if state is TaskState.FAILED or policy.unexpected_exit(self.job, status, self._succeeded()):
                if state is TaskState.SUCCEEDED:
                    self._update(ev.task, reason=f"{status.role} exited while training was running")
                self._failures.append(ev.task)

    def _report(self, ev: Progress | Usage, status: TaskStatus) -> None:
        """What a task reports: its progress, or a usage sample (not kept here: only the
        observers, the job store, want it)."""
        if isinstance(ev, Usage):
            self.observer.on_usage(self.snapshot(), status, ev)
        else:
            self._progress(ev, status)

    def _progress(self, ev: Progress, status: TaskStatus) -> None:
        # a step report (no epoch) updates the last epoch report instead of replacing it;
        # a goodput mark (a checkpoint's cost, training's start) is not progress to show
        if contract.MARK not in ev.data:
            self.logs.reported(ev.task)  # its Keras bars are now folded away on the terminal
            status = self._update(ev.task, progress={**status.progress, **ev.data},
                                  updated_at=ev.time)
        elif ev.data.get(contract.MARK) == contract.MARK_STAGE:  # shown with the task (status)
            staged = {k: ev.data.get(k) for k in ("seconds", "files", "copied", "bytes")}
            status = self._update(ev.task, progress={**status.progress, "staging": staged},
                                  updated_at=ev.time)
        if ev.task == self._reference:
            self._timeline.append(goodput.Report(ev.time, ev.task, ev.attempt, ev.data))
        self._activity[ev.task] = self.clock.monotonic()
        self._progress_file.write(
            json.dumps(
                {"time": round(ev.time, 3), "task": ev.task, "attempt": ev.attempt, **ev.data}
            )
            + "\n"
        )
        self.observer.on_progress(self.snapshot(), status, ev.time, ev.data)

    def _succeeded(self) -> bool:
        return policy.success_reached(self.job, self.statuses)

    def _next_event(self, timeout: float | None) -> list[Event]:
        events: list[Event] = []
        try:
            events.append(self.clock.wait(self.backend.events, timeout))
            while True:
                events.append(self.backend.events.get_nowait())
        except queue.Empty:
            pass
        return events

    # -- decisions -----------------------------------------------------------------------

    def _cause(self, name: str, message: str) -> RootCause:
        s = self.statuses[name]
        return RootCause(
            task=name,
            attempt=s.attempt,
            exit_code=s.exit_code,
            description=s.reason or describe_exit(s.exit_code),
            time=s.ended_at or self.clock.time(),
            message=message,
            tail=self.logs.tail(name),
        )

    def _handle_failures(self) -> bool:
        """Act on new failures. Returns True when the job has failed."""
        failures, self._failures = self._failures, []
        for name in failures:
            if isinstance(self.phase, phases.Restarting) and name in self.phase.due:
                continue  # already part of a restart decided in this round
            decision = policy.on_failure(self.job, self.statuses, name, self.restarts_used,
                                         final=name in self._final,
                                         addresses_vanish=self.backend.addresses_vanish)
            what = self.statuses[name].reason or describe_exit(self.statuses[name].exit_code)
            if isinstance(decision, policy.Fail):
                self.root_cause = self._cause(name, decision.reason)
                return True
            if isinstance(decision, policy.Ignore):
                self.logs.note(f"{name} failed ({what}); no restarts left, training goes on")
                continue
            if decision.counted:
                self.restarts_used += 1
                count = f"restart {self.restarts_used} of {self.job.restart_budget}"
            else:  # the evaluator's own budget
                own = self.statuses[name].restarts + 1
                count = f"evaluator restart {own} of {self.job.restart.max_restarts}"
            self.logs.note(
                f"{name} failed ({what}); restarting {', '.join(decision.tasks)} in "
                f"{decision.delay:.1f}s ({count})"
            )
            self._stop(decision.tasks, policy.restart_grace(self.job), f"restart after {name} failed")
            due = self.clock.monotonic() + decision.delay
            assert isinstance(self.phase, phases.Starting | phases.Running | phases.Restarting)
            self._enter(phases.restart(self.phase, decision.tasks, due, counted=decision.counted))
        return False

    def _cancel_restarts(self) -> None:
        """Training is over: restarts still waiting out their backoff never start (the phase
        that held them is left for draining)."""
        if isinstance(self.phase, phases.Restarting) and self.phase.due:
            self.logs.note(f"training finished; restart of {', '.join(sorted(self.phase.due))} cancelled")
        self.restarts_used -= phases.cancelled(self.phase)

    def _start_due(self, now: float) -> None:
        for name in phases.due_now(self.phase, self.statuses, now):
            assert isinstance(self.phase, phases.Restarting)
            self.phase = phases.started(self.phase, name)  # same phase by name: nothing to tell
            status = self.statuses[name]
            self._update(name, attempt=status.attempt + 1, restarts=status.restarts + 1)
            self._start(name)

    def _check_hangs(self, now: float) -> None:
        for name in policy.hung_tasks(self.job, self.statuses, self._activity, now):
            reason = f"hung: no output or progress for {self.job.hang_timeout_seconds:g}s"
            self._update(name, reason=reason)
            self._stop([name], self.job.stop_grace_seconds, reason)
            # The stop marks it STOPPED; a hang is a failure, so say so.
            self._set(name, TaskState.FAILED, {"reason": reason})
            self._failures.append(name)

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> JobResult:
        """Run the job to the end. Ctrl-C (KeyboardInterrupt) stops every task first.

        The end (the last stops, ``summary.json``) runs whole even if more signals come:
        an impatient second Ctrl-C must not lose the record.
        """
        state = JobState.FAILED
        ended = False  # False while an error (not an interrupt) is on its way out
        final_reason = "job ended"
        result: JobResult | None = None
        try:
            try:
                names = list(self.statuses)
                self.logs.register(names, self._reference)
                self.addresses = self.backend.reserve(task_ids(self.job))
                self._cluster = cluster_map(self.job, self.addresses)
                for name in names:
                    self._update(name, address=self.addresses.get(name))
                self.observer.on_start(self.snapshot(), tuple(self.statuses.values()))
                # the first round is launched now: the starting phase the goodput reads
                self._timeline.append(goodput.PhaseChange(self.clock.time(), self.phase.state))
                for name in names:
                    self._start(name)
                self.observer.on_launched(self.snapshot())
                state = self._loop()
            except KeyboardInterrupt:
                state = JobState.INTERRUPTED
                self._enter(phases.Ended(state))
                self.logs.note("interrupted: stopping every task")
                self._stop(list(self.statuses), self.job.stop_grace_seconds, "interrupted")
            ended = True
        except KeyboardInterrupt:  # another signal while stopping: the last stop is at once
            state, ended, final_reason = JobState.INTERRUPTED, True, "interrupted twice"
        finally:
            with interrupts.held(then_raise=False):
                self._enter(phases.Ended(state if ended else JobState.FAILED))
                self._stop(list(self.statuses), 0, final_reason)
                self._tell_outcome(state if ended else JobState.FAILED, None if ended else sys.exc_info()[1])
                self.backend.close()
                self._drain_events()
                self.logs.close()
                if ended:
                    result = self._finish(state)
        assert result is not None
        return result

    def _tell_outcome(self, state: JobState, error: BaseException | None) -> None:
        """The backend learns how the job ended (see :meth:`Backend.job_ended`): the root
        cause, or the error ending the run, in one line. It must not keep close() from running."""
        cause = self.root_cause
        why = f"{cause.task}: {cause.description}" if cause is not None else ""
        if not why and error is not None and not isinstance(error, KeyboardInterrupt):
            why = (str(error).strip().splitlines() or [type(error).__name__])[0]
        try:
            self.backend.job_ended(state, why)
        except Exception as err:  # a backend's report must never lose the run's own end
            self.logs.warn(f"the {self.backend.name} backend could not take the job's outcome: {err}")

    def _drain_events(self) -> None:
        """The events that came while the last tasks stopped: their exits, and their last
        lines (a task's "checkpoint saved" during its grace belongs in its log)."""
        for ev in self._next_event(timeout=0):
            self._apply(ev)

    def _loop(self) -> JobState:
        """Step from phase to phase until the job has ended; returns how it ended."""
        self._enter(phases.settle(self.statuses))
        while not isinstance(self.phase, phases.Ended):
            now = self.clock.monotonic()
            for ev in self._next_event(phases.timeout(self.phase, self.job, self._t0, now)):
                self._apply(ev)
            now = self.clock.monotonic()
            self._tell_goodput(now)
            if not isinstance(self.phase, phases.Draining):
                self._step_active(now)
            if isinstance(self.phase, phases.Draining):  # at once when training just succeeded
                self._step_draining(self.phase, now)
        return self.phase.outcome

    def _step_active(self, now: float) -> None:
        """Starting, running or restarting: the deadline, hangs, failures, due restarts and
        success, in that order; then the phase the tasks are in."""
        if phases.past_deadline(self.job, self._t0, now):
            running = [n for n, s in self.statuses.items() if s.state not in ENDED_TASK_STATES]
            culprit = running[0] if running else next(iter(self.statuses))
            self.root_cause = self._cause(
                culprit, f"the job ran past its deadline of {self.job.deadline_seconds:g}s")
            self.root_cause.description = "deadline exceeded"
            self._enter(phases.Ended(JobState.FAILED))
            return
        self._check_hangs(now)
        if self._handle_failures():
            self._enter(phases.Ended(JobState.FAILED))
            return
        self._start_due(now)
        if self._succeeded():
            stop_now, _ = policy.stop_at_success(self.job, self.statuses)
            if stop_now:
                self.logs.note(f"training finished; stopping {', '.join(stop_now)}")
            self._stop(stop_now, self.job.stop_grace_seconds, "training finished")
            self._cancel_restarts()
            self._enter(phases.drain(self.job, now))
            return
        phase = self.phase
        due = phase.due if isinstance(phase, phases.Restarting) else None
        unstarted = phase.unstarted if isinstance(phase, phases.Restarting) else ()
        self._enter(phases.settle(self.statuses, due, unstarted))

    def _step_draining(self, phase: phases.Draining, now: float) -> None:
        """Draining: ended once every task has, or when the drain time is over (the rest
        stopped)."""
        after, stop = phases.drained(phase, self.statuses, now)
        if stop:
            self.logs.note(f"stopping {', '.join(stop)} after {self.job.drain_seconds:g}s")
            self._stop(stop, self.job.stop_grace_seconds, "drain time over")
        self._enter(after)

    def _tell_goodput(self, now: float) -> None:
        """The goodput so far, to the observers, at most every :data:`GOODPUT_EVERY` seconds
        once training has reported a step (before that there is none to tell)."""
        if now < self._goodput_due:
            return
        found = goodput.breakdown(self._timeline, reference=self._reference, start=self.started_at,
                                  end=self.clock.time(), ended=False)
        if found is not None:
            self._goodput_due = now + GOODPUT_EVERY
            self.observer.on_goodput(self.snapshot(), goodput.so_far(found))

    def _goodput(self, state: JobState, ended: float) -> dict[str, Any] | None:
        """The goodput breakdown of the whole run (None if training reported no step)."""
        found = goodput.breakdown(self._timeline, reference=self._reference,
                                  start=self.started_at, end=ended,
                                  succeeded=state is JobState.SUCCEEDED)
        return found.to_dict() if found is not None else None

    def _finish(self, state: JobState) -> JobResult:
        ended = self.clock.time()
        metrics = self.statuses[policy.success_task(self.job)].progress.get("metrics", {})
        result = JobResult(
            name=self.job.name,
            state=state,
            run_dir=str(self.run_dir),
            started_at=self.started_at,
            ended_at=ended,
            restarts_used=self.restarts_used,
            max_restarts=self.job.restart_budget,
            tasks=tuple(self.statuses.values()),
            root_cause=self.root_cause,
            metrics=metrics if isinstance(metrics, dict) else {},
        )
        result.goodput = self._goodput(state, ended)
        self._events_file.close()
        self._progress_file.close()
        dropped = {**self.logs.dropped(), runs.EVENTS: self._events_file.dropped,
                   runs.PROGRESS: self._progress_file.dropped}
        result.lines_lost = {k: v for k, v in dropped.items() if v}
        summary = json.dumps(result.to_dict(), indent=2) + "\n"
        try:
            runfiles.write_reserved(self.run_dir / runs.SUMMARY, summary)
        except OSError as err:
            self.logs.warn(f"cannot write {runs.SUMMARY} ({err.strerror or err}); the job store has it")
        self.observer.on_finish(self.snapshot(), result)
        return result
