"""What the job store holds, as typed, frozen records: a job, a task, an attempt, a transition.

A task is the supervisor's own :class:`~tfdist.supervisor.status.TaskStatus`, one type from
the loop to the views: the recorder writes it as the task's row and :func:`task_from_row`
reads it back, for the views (``status``, the Python handle). States are the enums of
:mod:`tfdist.states`, never string literals. Records are frozen so a view can never change
what another part of the program read; :func:`dataclasses.replace` makes a changed copy
(a lost job's tasks shown as ``lost``).

Users see dicts only at the edges (``--json`` of ``list`` / ``status``, ``JobHandle.status()``):
each record's ``to_dict()`` gives exactly the keys those have always had (``idx`` for a task's
index, ``detached`` as 0/1), so scripts that read them keep working.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfdist.errors import warn
from tfdist.states import JobState, PhaseState, TaskState
from tfdist.supervisor.status import TaskStatus

#: A row as read: an ``sqlite3.Row`` or psycopg's dict row (read by column name).
Row = Any

_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """One line on stderr, once per process: a damaged row is shown, never hidden."""
    if message not in _WARNED:
        _WARNED.add(message)
        warn(message)


def decode_json(text: str | None, what: str) -> Any:
    """A JSON column; invalid JSON is said once (naming the row) and read as missing."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        warn_once(f"{what} is not valid JSON (the job store was damaged); it is shown as empty")
        return None


def task_from_row(row: Row) -> TaskStatus:
    """A ``tasks`` row as the status it recorded (a damaged column is said and shown empty)."""
    what = f"task {row['name']} of job {row['job_id']}"
    progress = decode_json(row["progress"], f"the last progress of {what}")
    return TaskStatus(
        name=row["name"], role=row["role"] or "", index=row["idx"] or 0,
        state=task_state(row["state"], what), attempt=row["attempt"] or 0,
        restarts=row["restarts"] or 0, pid=row["pid"], host=row["host"],
        address=row["address"], exit_code=row["exit_code"], reason=row["reason"],
        started_at=row["started_at"], ended_at=row["ended_at"],
        progress=progress if isinstance(progress, dict) else {},
        updated_at=row["updated_at"],
        usage=_usage(row, what),
    )


def _usage(row: Row, what: str) -> dict[str, Any]:
    """The task's latest resource use with its peaks (``tasks.resource_use``; none in a
    store row read without the column)."""
    try:
        text = row["resource_use"]
    except (IndexError, KeyError):
        return {}
    found = decode_json(text, f"the resource use of {what}")
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class JobRecord:
    """One job. ``state`` is what to show (``lost``, or the run directory's own summary when
    the store missed the end); ``recorded_state`` is what the store holds."""

    id: str
    name: str
    state: JobState
    backend: str | None = None
    run_dir: str | None = None
    detached: bool = False
    supervisor_pid: int | None = None
    supervisor_start: float | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    restarts_used: int = 0
    max_restarts: int | None = None
    root_cause: Mapping[str, Any] | None = None
    metrics: Mapping[str, Any] | None = None
    stop_requested: float | None = None
    tensorboard_url: str | None = None
    #: Who submitted it (the login name of the tfdist that recorded it).
    user: str | None = None
    #: The goodput breakdown recorded at the job's end (tfdist.supervisor.goodput).
    goodput: Mapping[str, Any] | None = None
    #: The supervisor's phase (tfdist.supervisor.phase) as last recorded; None before it
    #: started, or recorded by a tfdist that kept none.
    phase: PhaseState | None = None
    #: The job spec's own labels (``labels:``, ``--label``), as recorded when it started.
    labels: Mapping[str, str] = field(default_factory=dict)
    recorded_state: JobState | None = None
    #: Only in :meth:`Store.jobs` (the list view): how many tasks, how many running.
    task_count: int | None = None
    tasks_running: int | None = None
    #: Only in the dashboard's list: the lead task's (chief-0, else worker-0) last progress.
    lead_progress: Mapping[str, Any] | None = None

    @property
    def shown_phase(self) -> PhaseState | None:
        """The phase worth showing beside the state (``status``, the dashboard): a running
        job's when it says more than "running" (starting, restarting, draining)."""
        if self.state is JobState.RUNNING and self.phase not in (None, PhaseState.RUNNING, PhaseState.ENDED):
            return self.phase
        return None

    @property
    def stored_state(self) -> JobState:
        """The state the store holds (``state`` may be derived: ``lost``, or the summary's)."""
        return self.recorded_state or self.state

    def to_dict(self, *, counts: bool = False) -> dict[str, Any]:
        data = {
            "id": self.id, "name": self.name, "state": self.state.value,
            "backend": self.backend, "run_dir": self.run_dir, "detached": int(self.detached),
            "supervisor_pid": self.supervisor_pid, "supervisor_start": self.supervisor_start,
            "submitted_at": self.submitted_at, "started_at": self.started_at,
            "ended_at": self.ended_at, "exit_code": self.exit_code,
            "restarts_used": self.restarts_used, "max_restarts": self.max_restarts,
            "root_cause": dict(self.root_cause) if self.root_cause else None,
            "metrics": dict(self.metrics) if self.metrics else None,
            "stop_requested": self.stop_requested, "tensorboard_url": self.tensorboard_url,
            "user": self.user,
            "goodput": dict(self.goodput) if self.goodput else None,
            "phase": self.phase.value if self.phase else None,
            "labels": dict(self.labels),
        }
        if counts:
            data["task_count"] = self.task_count
            data["tasks_running"] = self.tasks_running
        data["recorded_state"] = self.stored_state.value
        return data

    @classmethod
    def from_row(cls, row: Row) -> JobRecord:
        what = f"job {row['id']}"
        state = job_state(row["state"], what)
        keys = row.keys()
        cause = decode_json(row["root_cause"], f"the root cause of {what}")
        metrics = decode_json(row["metrics"], f"the final metrics of {what}")
        goodput = decode_json(row["goodput"], f"the goodput of {what}") if "goodput" in keys else None
        labels = decode_json(row["labels"], f"the labels of {what}") if "labels" in keys else None
        return cls(
            id=row["id"], name=row["name"], state=state, backend=row["backend"],
            run_dir=row["run_dir"], detached=bool(row["detached"]),
            supervisor_pid=row["supervisor_pid"], supervisor_start=row["supervisor_start"],
            submitted_at=row["submitted_at"], started_at=row["started_at"],
            ended_at=row["ended_at"], exit_code=row["exit_code"],
            restarts_used=row["restarts_used"] or 0, max_restarts=row["max_restarts"],
            root_cause=cause if isinstance(cause, dict) else None,
            metrics=metrics if isinstance(metrics, dict) else None,
            stop_requested=row["stop_requested"], tensorboard_url=row["tensorboard_url"],
            user=row["username"] if "username" in keys else None,
            goodput=goodput if isinstance(goodput, dict) else None,
            phase=_phase(row["phase"]) if "phase" in keys else None, recorded_state=state,
            labels=_labels(labels),
            task_count=row["task_count"] if "task_count" in keys else None,
            tasks_running=row["tasks_running"] if "tasks_running" in keys else None,
            lead_progress=_lead(row, what) if "lead_progress" in keys else None,
        )


def _labels(found: Any) -> dict[str, str]:
    """Stored labels that are labels: a row written by other means (a shared PostgreSQL store)
    cannot bring markup or control characters to a terminal or a page through them."""
    from tfdist.jobspec.labels import key_ok, value_ok

    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(v, str) and key_ok(k) and value_ok(v)}


def _lead(row: Row, what: str) -> Mapping[str, Any] | None:
    found = decode_json(row["lead_progress"], f"the last progress of {what}")
    return found if isinstance(found, dict) else None


def _phase(value: Any) -> PhaseState | None:
    """A recorded phase, or None for anything else (a store is shared: hostile)."""
    try:
        return PhaseState(value)
    except ValueError:
        return None


def _with_state_value(record: AttemptRecord | TransitionRecord) -> dict[str, Any]:
    data = dataclasses.asdict(record)
    data["state"] = record.state.value
    return data


@dataclass(frozen=True)
class AttemptRecord:
    """One run of one task (a restart is a new attempt): the restart history."""

    job_id: str
    task: str
    attempt: int
    state: TaskState
    pid: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _with_state_value(self)

    @classmethod
    def from_row(cls, row: Row) -> AttemptRecord:
        state = task_state(row["state"], f"attempt {row['attempt']} of task {row['task']}")
        return cls(row["job_id"], row["task"], row["attempt"], state, row["pid"],
                   row["started_at"], row["ended_at"], row["exit_code"], row["reason"])


@dataclass(frozen=True)
class TransitionRecord:
    """One state change: of the job (``task`` is None, a :class:`JobState`) or of a task."""

    id: int
    job_id: str
    task: str | None
    attempt: int | None
    state: JobState | TaskState
    time: float
    exit_code: int | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _with_state_value(self)

    @classmethod
    def from_row(cls, row: Row) -> TransitionRecord:
        what = f"a transition of job {row['job_id']}"
        state: JobState | TaskState = (
            job_state(row["state"], what) if row["task"] is None else task_state(row["state"], what)
        )
        return cls(row["id"], row["job_id"], row["task"], row["attempt"], state, row["time"],
                   row["exit_code"], row["reason"])


@dataclass(frozen=True)
class JobStatus:
    """What ``status`` shows: a job, its tasks and (if asked) its history."""

    job: JobRecord
    tasks: tuple[TaskStatus, ...]
    duration: float | None
    transitions: tuple[TransitionRecord, ...] | None = None
    attempts: tuple[AttemptRecord, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``status --json`` / ``JobHandle.status()`` dict, keys as they always were."""
        data = self.job.to_dict()
        data["tasks"] = [{"job_id": self.job.id, **t.to_dict()} for t in self.tasks]
        if self.transitions is not None:
            data["transitions"] = [t.to_dict() for t in self.transitions]
        if self.attempts is not None:
            data["attempts"] = [a.to_dict() for a in self.attempts]
        data["duration"] = self.duration
        return data


def job_state(text: str, what: str) -> JobState:
    try:
        return JobState(text)
    except ValueError:
        from tfdist.errors import StoreError

        raise StoreError(f"the job store is damaged: {what} has an unknown state {text!r}; "
                         "move the store away (see TFDIST_HOME) to start a new one") from None


def task_state(text: str | None, what: str) -> TaskState:
    try:
        return TaskState(text or "pending")
    except ValueError:
        warn_once(f"{what} has an unknown state {text!r} in the job store; shown as lost")
        return TaskState.LOST
