"""The job store: every job's history, in an SQLite file under ``$TFDIST_HOME`` (the
default) or in a PostgreSQL database a team shares (``TFDIST_STORE=postgresql://...``).

Tables: ``jobs`` (with the user who submitted each), ``tasks`` (the latest state of each),
``attempts``, ``transitions`` (every state change, job and task, with its time) and
``progress``. Every query and write here is written once, in SQL both databases speak; what
differs (opening, the write lock, what a driver's error means) is a small dialect object:
:mod:`tfdist.jobs.store_sqlite` and :mod:`tfdist.jobs.store_postgres`
(:mod:`tfdist.jobs.dialect` is the seam). Every write is one short transaction holding the
store's one write lock.

A job records the pid and process start time of its supervisor. A job the store says is
running whose supervisor no longer exists (SIGKILL, reboot) is reported as ``lost``: the
pid must exist *and* have the same start time, so a reused pid does not count.

Reads return typed, frozen records (:mod:`tfdist.jobs.records`). Writes are *operations*
(functions of a connection, built by the ``op_*`` functions) so that the recorder's writer
thread can run many in one transaction (:mod:`tfdist.jobs.writer`); the ``Store`` methods
run one each. Every failure of the store itself is a :class:`~tfdist.errors.StoreError` whose
one-line message names the real cause and its remedy.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdist.errors import SpecError, StoreError
from tfdist.home import current_user
from tfdist.jobs import faults
from tfdist.jobs.dialect import Db, Dialect
from tfdist.jobs.fallback import effective_job
from tfdist.jobs.location import StoreLocation, default_path, location, parse
from tfdist.jobs.records import (
    AttemptRecord,
    JobRecord,
    TransitionRecord,
    decode_json,
    task_from_row,
)
from tfdist.states import JobState, PhaseState, TaskState
from tfdist.supervisor.status import TaskStatus

__all__ = ["JobRef", "Op", "Store"]

#: One write: a function of the connection, run inside a transaction.
Op = Callable[[Db], Any]


@dataclass
class JobRef:
    """A job id known only once its create operation has run (in the writer thread)."""

    id: str | None = None


def _id(job: str | JobRef) -> str:
    if isinstance(job, str):
        return job
    if job.id is None:
        raise StoreError("internal: a job operation ran before the job was created", "corrupt")
    return job.id


#: A job's id is its run directory's name, so no longer than a file name can be (bytes).
MAX_REF_BYTES = 255


def check_ref(ref: str) -> str:
    """``ref`` if it could name a job (an id or a prefix of one), else bad input.

    A job id is the name of a directory: UTF-8 text, no NUL, at most 255 bytes. Anything
    else names no job; it is refused before it reaches the database (where a NUL would be
    cut off by one driver and refused by the other, a byte that is not UTF-8 could not be
    sent, and a pattern of 100,000 characters is "too complex" for SQLite's LIKE)."""
    shown = ascii(ref[:40])[1:-1] + ("..." if len(ref) > 40 else "")
    try:
        size = len(ref.encode("utf-8"))
    except UnicodeEncodeError:
        raise SpecError(f"job '{shown}': not UTF-8 text, so no job's id; `tfdist list` shows "
                        "the jobs") from None
    if "\x00" in ref:
        raise SpecError(f"job '{shown}': contains a NUL byte, so no job's id; `tfdist list` "
                        "shows the jobs")
    if not ref or size > MAX_REF_BYTES:
        raise SpecError(f"job '{shown}': {'empty' if not ref else f'{size} bytes long'}: a job's "
                        f"id is 1 to {MAX_REF_BYTES} bytes; `tfdist list` shows the jobs")
    return ref


# -- write operations ---------------------------------------------------------------------


def op_create_job(job_id: str, *, name: str, run_dir: str, backend: str, state: JobState,
                  detached: bool = False, max_restarts: int | None = None,
                  supervisor_pid: int | None = None, supervisor_start: float | None = None,
                  ref: JobRef | None = None, user: str | None = None,
                  labels: Mapping[str, str] | None = None) -> Op:
    """Insert a job; its id is ``job_id`` or ``job_id-N`` if that is taken by another run
    directory. A job already recorded for ``run_dir`` keeps its id (so running it again,
    e.g. a retried batch, changes nothing). The id is returned and set on ``ref``. ``user``
    (default: who runs this process) is who submitted it; ``labels`` the job spec's own."""
    now = time.time()
    username = user or current_user()

    def insert(db: Db) -> str:
        row = db.execute("SELECT id FROM jobs WHERE run_dir = ?", (run_dir,)).fetchone()
        if row:
            candidate = str(row["id"])
        else:
            candidate, n = job_id, 1
            while db.execute("SELECT 1 FROM jobs WHERE id = ?", (candidate,)).fetchone():
                n += 1
                candidate = f"{job_id}-{n}"
            db.execute(
                "INSERT INTO jobs (id, name, state, backend, run_dir, detached, submitted_at, "
                "max_restarts, supervisor_pid, supervisor_start, username, labels) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (candidate, name, state.value, backend, run_dir, int(detached), now, max_restarts,
                 supervisor_pid, supervisor_start, username, labels_json(labels)),
            )
            _job_transition(db, candidate, state, now)
        if ref is not None:
            ref.id = candidate
        return candidate

    return insert


def labels_json(labels: Mapping[str, str] | None) -> str | None:
    """A job's labels as stored: JSON, keys sorted, no spaces (see tables.MIGRATIONS[6])."""
    return json.dumps(dict(sorted(labels.items())), separators=(",", ":")) if labels else None


def _job_transition(db: Db, job_id: str, state: JobState, now: float, *,
                    exit_code: int | None = None, reason: str | None = None) -> None:
    db.execute("INSERT INTO transitions (job_id, task, state, time, exit_code, reason) "
               "VALUES (?, NULL, ?, ?, ?, ?)", (job_id, state.value, now, exit_code, reason))


def op_job_running(job: str | JobRef, pid: int, start: float | None) -> Op:
    now = time.time()

    def update(db: Db) -> None:
        job_id = _id(job)
        db.execute("UPDATE jobs SET state = ?, started_at = ?, supervisor_pid = ?, "
                   "supervisor_start = ? WHERE id = ?", (JobState.RUNNING.value, now, pid, start, job_id))
        _job_transition(db, job_id, JobState.RUNNING, now)

    return update


def op_job_phase(job: str | JobRef, phase: PhaseState) -> Op:
    """The supervisor's phase (tfdist.supervisor.phase), for ``status`` and the dashboard."""

    def update(db: Db) -> None:
        db.execute("UPDATE jobs SET phase = ? WHERE id = ?", (phase.value, _id(job)))

    return update


def op_job_started_at(job: str | JobRef, started_at: float) -> Op:
    """When the job really started: the supervisor's start. The running record is made only
    once the tasks are started (:class:`~tfdist.supervisor.observer.Deferred`), so its own
    time can come after the tasks' first reports, whose times are measured from this one."""

    def update(db: Db) -> None:
        db.execute("UPDATE jobs SET started_at = ? WHERE id = ?", (started_at, _id(job)))

    return update


def op_job_goodput(job: str | JobRef, goodput: Mapping[str, Any]) -> Op:
    """The goodput so far of a running job (tfdist.supervisor.goodput.so_far); the end's
    (:func:`op_job_finished`) replaces it, and a job already ended keeps that one."""

    def update(db: Db) -> None:
        db.execute("UPDATE jobs SET goodput = ? WHERE id = ? AND ended_at IS NULL",
                   (json.dumps(dict(goodput)), _id(job)))

    return update


def op_job_finished(job: str | JobRef, *, state: JobState, exit_code: int | None,
                    restarts_used: int, root_cause: Mapping[str, Any] | None,
                    metrics: Mapping[str, Any] | None, ended_at: float | None = None,
                    goodput: Mapping[str, Any] | None = None) -> Op:
    """The end of a job; an interrupted job someone asked to stop is ``stopped``."""
    now = ended_at or time.time()

    def update(db: Db) -> JobState:
        job_id = _id(job)
        row = db.execute("SELECT stop_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
        final = (JobState.STOPPED if state is JobState.INTERRUPTED and row and row["stop_requested"]
                 else state)
        db.execute(
            "UPDATE jobs SET state = ?, ended_at = ?, exit_code = ?, restarts_used = ?, "
            "root_cause = ?, metrics = ?, goodput = ? WHERE id = ?",
            (final.value, now, exit_code, restarts_used,
             json.dumps(dict(root_cause)) if root_cause else None,
             json.dumps(dict(metrics)) if metrics else None,
             json.dumps(dict(goodput)) if goodput else None, job_id),
        )
        _job_transition(db, job_id, final, now, exit_code=exit_code)
        return final

    return update


def op_mark(job: str | JobRef, state: JobState, reason: str | None = None) -> Op:
    """Force a job's state (``stopped`` after a forced stop, ``failed`` when it never ran)."""
    now = time.time()

    def update(db: Db) -> None:
        job_id = _id(job)
        db.execute("UPDATE jobs SET state = ?, ended_at = COALESCE(ended_at, ?) WHERE id = ?",
                   (state.value, now, job_id))
        _job_transition(db, job_id, state, now, reason=reason)

    return update


_TASK_UPSERT = (
    "INSERT INTO tasks (job_id, name, role, idx, state, attempt, restarts, pid, host, address, "
    "exit_code, reason, started_at, ended_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (job_id, name) DO UPDATE SET state = excluded.state, attempt = excluded.attempt, "
    "restarts = excluded.restarts, pid = excluded.pid, host = excluded.host, "
    "address = excluded.address, exit_code = excluded.exit_code, reason = excluded.reason, "
    "started_at = excluded.started_at, ended_at = excluded.ended_at, updated_at = excluded.updated_at"
)
_ATTEMPT_UPSERT = (
    "INSERT INTO attempts (job_id, task, attempt, state, pid, started_at, ended_at, exit_code, "
    "reason) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (job_id, task, attempt) DO UPDATE SET "
    "state = excluded.state, pid = excluded.pid, started_at = excluded.started_at, "
    "ended_at = excluded.ended_at, exit_code = excluded.exit_code, reason = excluded.reason"
)


def op_task_transition(job: str | JobRef, task: TaskStatus, when: float,
                       restarts_used: int | None = None, *, history: bool = True) -> Op:
    """A task's new state: its ``tasks`` row and (with ``history``) its attempt row and a
    transition. Without ``history`` only the latest state is set (the final sync)."""

    def update(db: Db) -> None:
        job_id = _id(job)
        state = task.state.value
        db.execute(_TASK_UPSERT, (job_id, task.name, task.role, task.index, state, task.attempt,
                                  task.restarts, task.pid, task.host, task.address, task.exit_code,
                                  task.reason, task.started_at, task.ended_at, when))
        if history:
            db.execute(_ATTEMPT_UPSERT, (job_id, task.name, task.attempt, state, task.pid,
                                         task.started_at, task.ended_at, task.exit_code, task.reason))
            db.execute("INSERT INTO transitions (job_id, task, attempt, state, time, exit_code, "
                       "reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (job_id, task.name, task.attempt, state, when, task.exit_code, task.reason))
        if restarts_used is not None:
            db.execute("UPDATE jobs SET restarts_used = ? WHERE id = ?", (restarts_used, job_id))

    return update


def op_task_progress(job: str | JobRef, task: str, attempt: int, when: float,
                     data: Mapping[str, Any], latest: Mapping[str, Any] | None = None) -> Op:
    """A progress report (``data``) into the history; the task's last progress (what
    ``status`` shows) becomes ``latest``: the supervisor's merge of the reports so far
    (a step report on top of the epoch's metrics, a goodput mark left out), else ``data``."""
    text = json.dumps(dict(data))
    shown = text if latest is None else json.dumps(dict(latest))

    def update(db: Db) -> None:
        job_id = _id(job)
        db.execute("INSERT INTO progress (job_id, task, attempt, time, data) VALUES (?, ?, ?, ?, ?)",
                   (job_id, task, attempt, when, text))
        db.execute("UPDATE tasks SET progress = ?, updated_at = ? WHERE job_id = ? AND name = ?",
                   (shown, when, job_id, task))

    return update


# -- the store ----------------------------------------------------------------------------


class Store:
    """One connection to the job store. Cheap to open; open one per process (or thread).

    ``where`` is an SQLite file, a PostgreSQL URL or a :class:`StoreLocation`; by default
    ``TFDIST_STORE``, else ``$TFDIST_HOME/jobs.db`` (:mod:`tfdist.jobs.location`).
    ``timeout`` (seconds) is how long an operation waits for another process's lock; the
    default is ``TFDIST_STORE_TIMEOUT`` (15), read and checked here, not at import."""

    def __init__(self, where: str | Path | StoreLocation | None = None, *,
                 timeout: float | None = None) -> None:
        self.location = (where if isinstance(where, StoreLocation)
                         else parse(where, "the job store") if where else location())
        self.timeout = faults.busy_timeout() if timeout is None else timeout
        self._dialect: Dialect
        if self.location.url:
            from tfdist.jobs.store_postgres import PostgresDialect

            self._dialect = self._opening(lambda: PostgresDialect(str(self.location.url), self.timeout))
        else:
            from tfdist.jobs.store_sqlite import SqliteDialect

            path = self.location.path or default_path()
            self._dialect = self._opening(lambda: SqliteDialect(path, self.timeout))

    @property
    def path(self) -> Path | None:
        """The SQLite file (None for a PostgreSQL store)."""
        return self.location.path

    @property
    def kind(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.location.kind

    def _opening(self, make: Callable[[], Dialect]) -> Dialect:
        """Open the dialect; its errors are classified by a dialect of the same kind (the
        store is not open yet, so ``self._dialect`` cannot)."""
        try:
            return make()
        except (StoreError, SpecError):
            raise
        except Exception as err:
            if self.location.url:
                from tfdist.jobs import store_postgres

                raise store_postgres.classify(err, str(self.location), "open",
                                              self.timeout) from None
            import sqlite3

            if isinstance(err, sqlite3.Error | OSError):
                raise faults.classify(err, self.location.path or default_path(), "open",
                                      self.timeout) from None
            raise

    # -- plumbing --------------------------------------------------------------------

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Turn the driver's and OS errors into one-line StoreErrors that name the cause."""
        try:
            yield
        except StoreError:
            raise
        except self._dialect.errors as err:
            raise self._dialect.classify(err, what) from None

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Db]:
        """One write transaction, taking the store's write lock up front."""
        with self._dialect.transaction() as db:
            yield db

    def write(self, what: str, op: Op) -> Any:
        with self._guard(what), self._tx() as db:
            return op(db)

    def write_batch(self, ops: Iterable[Op], what: str = "update") -> None:
        """Several operations in one transaction: all of them land, or none."""
        with self._guard(what), self._tx() as db:
            for op in ops:
                op(db)

    def read(self, what: str, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self._rows(what, sql, args)]

    def _rows(self, what: str, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._guard(what):
            return list(self._dialect.db().execute(sql, args).fetchall())

    def close(self) -> None:
        self._dialect.close()

    # -- jobs ------------------------------------------------------------------------

    def create_job(self, job_id: str, *, name: str, run_dir: str, backend: str, state: JobState,
                   detached: bool = False, max_restarts: int | None = None,
                   supervisor_pid: int | None = None, supervisor_start: float | None = None,
                   labels: Mapping[str, str] | None = None) -> str:
        """Insert a job (see :func:`op_create_job`); returns its id."""
        op = op_create_job(job_id, name=name, run_dir=run_dir, backend=backend,
                           state=JobState(state), detached=detached, max_restarts=max_restarts,
                           supervisor_pid=supervisor_pid, supervisor_start=supervisor_start,
                           labels=labels)
        return str(self.write("record a job in", op))

    def set_supervisor(self, job_id: str, pid: int, start: float | None) -> None:
        self.write("update", lambda db: db.execute(
            "UPDATE jobs SET supervisor_pid = ?, supervisor_start = ? "
            "WHERE id = ? AND supervisor_pid IS NULL", (pid, start, job_id)))

    def request_stop(self, job_id: str) -> float | None:
        """Note that a stop was asked for; returns when an earlier stop was asked (None if
        this is the first), so that a second ``tfdist stop`` can wait for the first."""
        now = time.time()

        def update(db: Db) -> float | None:
            row = db.execute("SELECT stop_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row and row["stop_requested"]:
                return float(row["stop_requested"])
            db.execute("UPDATE jobs SET stop_requested = ? WHERE id = ?", (now, job_id))
            return None

        return self.write("update", update)  # type: ignore[no-any-return]

    def mark(self, job_id: str, state: JobState, reason: str | None = None) -> None:
        self.write("update", op_mark(job_id, JobState(state), reason))

    def set_tensorboard(self, job_id: str, url: str | None) -> None:
        self.write("update", lambda db: db.execute(
            "UPDATE jobs SET tensorboard_url = ? WHERE id = ?", (url, job_id)))

    def delete_job(self, job_id: str) -> None:
        def delete(db: Db) -> None:
            for table, col in (("usage_samples", "job_id"), ("task_inputs", "job_id"),
                               ("progress", "job_id"), ("transitions", "job_id"),
                               ("attempts", "job_id"), ("tasks", "job_id"), ("jobs", "id")):
                db.execute(f"DELETE FROM {table} WHERE {col} = ?", (job_id,))

        self.write("delete a job from", delete)

    # -- tasks ---------------------------------------------------------------------------

    # -- reading -------------------------------------------------------------------------

    def records(self, what: str, sql: str, args: tuple[Any, ...] = ()) -> list[JobRecord]:
        rows = self._rows(what, sql, args)
        with self._guard(what):
            return [JobRecord.from_row(r) for r in rows]

    def jobs(self) -> list[JobRecord]:
        """Every job, newest first, with task counts; ``state`` is what to show (``lost``, or
        the run's own summary where the store missed the end: :mod:`tfdist.jobs.fallback`)."""
        rows = self.records(
            "read",
            "SELECT j.*, (SELECT COUNT(*) FROM tasks t WHERE t.job_id = j.id) AS task_count, "
            "(SELECT COUNT(*) FROM tasks t WHERE t.job_id = j.id AND t.state = ?) "
            "AS tasks_running FROM jobs j ORDER BY j.submitted_at DESC, j.id DESC",
            (TaskState.RUNNING.value,),
        )
        now = time.time()
        return [effective_job(r, now) for r in rows]

    def job(self, ref: str, exact: bool = False) -> JobRecord:
        """The job whose id is ``ref`` or starts with it (a unique prefix; only the id itself
        when ``exact``, as the dashboard's addresses are). A ``ref`` that cannot be an id is
        bad input (:func:`check_ref`)."""
        check_ref(ref)
        rows = self.records("read", "SELECT * FROM jobs WHERE id = ?", (ref,))
        if not rows and not exact:
            like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self.records(
                "read", "SELECT * FROM jobs WHERE id LIKE ? ESCAPE '\\' ORDER BY id", (like,))
        if not rows:
            raise StoreError(f"no job '{ref}' in {self.location}; `tfdist list` shows the jobs")
        if len(rows) > 1:
            names = ", ".join(r.id for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
            raise StoreError(f"'{ref}' matches {len(rows)} jobs ({names}); give more of the id")
        return effective_job(rows[0])

    def job_id_for_run_dir(self, run_dir: str) -> str | None:
        rows = self._rows("read", "SELECT id FROM jobs WHERE run_dir = ?", (run_dir,))
        return str(rows[0]["id"]) if rows else None

    def tasks(self, job_id: str) -> list[TaskStatus]:
        """The latest state of each task as recorded, chief first, then workers, ps, others."""
        rows = self._rows(
            "read", "SELECT * FROM tasks WHERE job_id = ? ORDER BY role = 'chief' DESC, "
            "role = 'worker' DESC, role = 'ps' DESC, role, idx", (job_id,))
        return [task_from_row(r) for r in rows]

    def attempts(self, job_id: str) -> list[AttemptRecord]:
        rows = self._rows(
            "read", "SELECT * FROM attempts WHERE job_id = ? ORDER BY task, attempt", (job_id,))
        return [AttemptRecord.from_row(r) for r in rows]

    def transitions(self, job_id: str) -> list[TransitionRecord]:
        rows = self._rows("read", "SELECT * FROM transitions WHERE job_id = ? ORDER BY id", (job_id,))
        with self._guard("read"):
            return [TransitionRecord.from_row(r) for r in rows]

    def progress(self, job_id: str) -> list[dict[str, Any]]:
        """Every progress report, oldest first: free-form data from the training script
        (plus ``time``, ``task``, ``attempt``), so plain dicts, read by :mod:`metrics`."""
        rows = self._rows(
            "read", "SELECT task, attempt, time, data FROM progress WHERE job_id = ? ORDER BY id",
            (job_id,))
        out = []
        for r in rows:
            data = decode_json(r["data"], f"a progress report of task {r['task']} of job {job_id}")
            out.append({"time": r["time"], "task": r["task"], "attempt": r["attempt"],
                        **(data if isinstance(data, dict) else {})})
        return out
