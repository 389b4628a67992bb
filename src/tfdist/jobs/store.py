"""The job store: every job's history in one SQLite file under ``$TFDIST_HOME``.

``$TFDIST_HOME`` defaults to ``~/.tfdist``; the file is ``jobs.db``. Stdlib ``sqlite3`` in
WAL mode with a busy timeout, so many tfdist processes (supervisors writing, ``list`` and
``status`` reading) share it safely; every write is one short ``BEGIN IMMEDIATE``
transaction. Tables: ``jobs``, ``tasks`` (the latest state of each), ``attempts``,
``transitions`` (every state change, job and task, with its time) and ``progress``.

A job records the pid and process start time of its supervisor. A job the store says is
running whose supervisor no longer exists (SIGKILL, reboot) is reported as ``lost``: the
pid must exist *and* have the same start time, so a reused pid does not count.

Every failure of the store itself is a :class:`~tfdist.errors.StoreError` with a one-line
message that says what to do (locked: try again; corrupt: move the file away).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tfdist.errors import StoreError
from tfdist.jobs.liveness import effective_state
from tfdist.states import ACTIVE_JOB_STATES, FINAL_JOB_STATES

SCHEMA_VERSION = 1
#: How long a writer waits for another's lock before a StoreError (TFDIST_STORE_TIMEOUT, s).
BUSY_TIMEOUT_MS = int(float(os.environ.get("TFDIST_STORE_TIMEOUT") or 15) * 1000)
#: Job states written by tfdist; ``lost`` is derived when reading.
ACTIVE = ACTIVE_JOB_STATES
FINAL = FINAL_JOB_STATES

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    backend TEXT,
    run_dir TEXT,
    detached INTEGER NOT NULL DEFAULT 0,
    supervisor_pid INTEGER,
    supervisor_start REAL,
    submitted_at REAL,
    started_at REAL,
    ended_at REAL,
    exit_code INTEGER,
    restarts_used INTEGER NOT NULL DEFAULT 0,
    max_restarts INTEGER,
    root_cause TEXT,
    metrics TEXT,
    stop_requested REAL,
    tensorboard_url TEXT
);
CREATE INDEX IF NOT EXISTS jobs_run_dir ON jobs(run_dir);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL,
    name TEXT NOT NULL,
    role TEXT,
    idx INTEGER,
    state TEXT,
    attempt INTEGER,
    restarts INTEGER,
    pid INTEGER,
    host TEXT,
    address TEXT,
    exit_code INTEGER,
    reason TEXT,
    started_at REAL,
    ended_at REAL,
    progress TEXT,
    updated_at REAL,
    PRIMARY KEY (job_id, name)
);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL,
    task TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    state TEXT,
    pid INTEGER,
    started_at REAL,
    ended_at REAL,
    exit_code INTEGER,
    reason TEXT,
    PRIMARY KEY (job_id, task, attempt)
);
CREATE TABLE IF NOT EXISTS transitions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    task TEXT,
    attempt INTEGER,
    state TEXT NOT NULL,
    time REAL NOT NULL,
    exit_code INTEGER,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions(job_id);
CREATE TABLE IF NOT EXISTS progress (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    task TEXT NOT NULL,
    attempt INTEGER,
    time REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS progress_job ON progress(job_id);
"""


def home() -> Path:
    return Path(os.environ.get("TFDIST_HOME") or Path.home() / ".tfdist").expanduser()


def default_path() -> Path:
    return home() / "jobs.db"


class Store:
    """One connection to the job store. Cheap to open; open one per process."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else default_path()
        with self._guard("open"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(self.path),
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            self._db.row_factory = sqlite3.Row
            self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            if self._db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                with self._tx() as db:
                    for stmt in filter(str.strip, _SCHEMA.split(";")):
                        db.execute(stmt)
                    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # -- plumbing --------------------------------------------------------------------

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Turn sqlite and OS errors into one-line StoreErrors."""
        try:
            yield
        except StoreError:
            raise
        except sqlite3.OperationalError as err:
            text = str(err)
            if "locked" in text or "busy" in text:
                raise StoreError(
                    f"job store {self.path} is locked by another process "
                    f"(waited {BUSY_TIMEOUT_MS / 1000:g}s while trying to {what}); try again"
                ) from None
            if "unable to open" in text or "readonly" in text:
                raise StoreError(
                    f"cannot {what} the job store {self.path} ({text}); check that "
                    f"TFDIST_HOME ({self.path.parent}) is a writable directory"
                ) from None
            raise StoreError(self._corrupt(text)) from None
        except sqlite3.DatabaseError as err:
            raise StoreError(self._corrupt(str(err))) from None
        except OSError as err:
            raise StoreError(
                f"cannot {what} the job store {self.path}: {err.strerror or err}"
            ) from None

    def _corrupt(self, detail: str) -> str:
        return (
            f"job store {self.path} is unreadable ({detail}); move it away to start a new one: "
            f"mv {self.path} {self.path}.bad"
        )

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the write lock up front (busy_timeout applies)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def write(self, what: str, fn: Any) -> Any:
        with self._guard(what), self._tx() as db:
            return fn(db)

    def read(self, what: str, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self._guard(what):
            return [dict(r) for r in self._db.execute(sql, args).fetchall()]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._db.close()

    # -- jobs ------------------------------------------------------------------------

    def create_job(
        self,
        job_id: str,
        *,
        name: str,
        run_dir: str,
        backend: str,
        state: str,
        detached: bool = False,
        max_restarts: int | None = None,
        supervisor_pid: int | None = None,
        supervisor_start: float | None = None,
    ) -> str:
        """Insert a job; returns its id, ``job_id`` or ``job_id-N`` if that is taken by
        another run directory. A job already recorded for ``run_dir`` keeps its id."""
        now = time.time()

        def insert(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT id FROM jobs WHERE run_dir = ?", (run_dir,)).fetchone()
            if row:
                return str(row["id"])
            candidate, n = job_id, 1
            while db.execute("SELECT 1 FROM jobs WHERE id = ?", (candidate,)).fetchone():
                n += 1
                candidate = f"{job_id}-{n}"
            db.execute(
                "INSERT INTO jobs (id, name, state, backend, run_dir, detached, submitted_at, "
                "max_restarts, supervisor_pid, supervisor_start) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (candidate, name, state, backend, run_dir, int(detached), now, max_restarts,
                 supervisor_pid, supervisor_start),
            )
            db.execute(
                "INSERT INTO transitions (job_id, task, state, time) VALUES (?, NULL, ?, ?)",
                (candidate, state, now),
            )
            return candidate

        return str(self.write("record a job in", insert))

    def set_supervisor(self, job_id: str, pid: int, start: float | None) -> None:
        self.write(
            "update",
            lambda db: db.execute(
                "UPDATE jobs SET supervisor_pid = ?, supervisor_start = ? "
                "WHERE id = ? AND supervisor_pid IS NULL",
                (pid, start, job_id),
            ),
        )

    def job_running(self, job_id: str, pid: int, start: float | None) -> None:
        now = time.time()

        def update(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE jobs SET state = 'running', started_at = ?, supervisor_pid = ?, "
                "supervisor_start = ? WHERE id = ?",
                (now, pid, start, job_id),
            )
            db.execute(
                "INSERT INTO transitions (job_id, task, state, time) VALUES (?, NULL, 'running', ?)",
                (job_id, now),
            )

        self.write("update", update)

    def job_finished(
        self,
        job_id: str,
        *,
        state: str,
        exit_code: int | None,
        restarts_used: int,
        root_cause: dict[str, Any] | None,
        metrics: dict[str, Any] | None,
        ended_at: float | None = None,
    ) -> str:
        """Record the end of a job; an interrupted job someone asked to stop is ``stopped``."""
        now = ended_at or time.time()

        def update(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT stop_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
            final = state
            if state == "interrupted" and row and row["stop_requested"]:
                final = "stopped"
            db.execute(
                "UPDATE jobs SET state = ?, ended_at = ?, exit_code = ?, restarts_used = ?, "
                "root_cause = ?, metrics = ? WHERE id = ?",
                (final, now, exit_code, restarts_used,
                 json.dumps(root_cause) if root_cause else None,
                 json.dumps(metrics) if metrics else None, job_id),
            )
            db.execute(
                "INSERT INTO transitions (job_id, task, state, time, exit_code) "
                "VALUES (?, NULL, ?, ?, ?)",
                (job_id, final, now, exit_code),
            )
            return final

        return str(self.write("update", update))

    def request_stop(self, job_id: str) -> None:
        self.write(
            "update",
            lambda db: db.execute(
                "UPDATE jobs SET stop_requested = ? WHERE id = ?", (time.time(), job_id)
            ),
        )

    def mark(self, job_id: str, state: str, reason: str | None = None) -> None:
        """Force a job's state (``stopped`` after a forced stop, ``lost``)."""
        now = time.time()

        def update(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE jobs SET state = ?, ended_at = COALESCE(ended_at, ?) WHERE id = ?",
                (state, now, job_id),
            )
            db.execute(
                "INSERT INTO transitions (job_id, task, state, time, reason) VALUES (?, NULL, ?, ?, ?)",
                (job_id, state, now, reason),
            )

        self.write("update", update)

    def set_tensorboard(self, job_id: str, url: str | None) -> None:
        self.write(
            "update",
            lambda db: db.execute(
                "UPDATE jobs SET tensorboard_url = ? WHERE id = ?", (url, job_id)
            ),
        )

    def delete_job(self, job_id: str) -> None:
        def delete(db: sqlite3.Connection) -> None:
            for table, col in (("progress", "job_id"), ("transitions", "job_id"),
                               ("attempts", "job_id"), ("tasks", "job_id"), ("jobs", "id")):
                db.execute(f"DELETE FROM {table} WHERE {col} = ?", (job_id,))

        self.write("delete a job from", delete)

    # -- tasks ---------------------------------------------------------------------------

    def task_transition(self, job_id: str, task: dict[str, Any], when: float,
                        restarts_used: int | None = None) -> None:
        """Record a task's new state: the tasks row, its attempt row and a transition."""

        def update(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO tasks (job_id, name, role, idx, state, attempt, restarts, pid, host, "
                "address, exit_code, reason, started_at, ended_at, updated_at) "
                "VALUES (:job_id, :name, :role, :index, :state, :attempt, :restarts, :pid, :host, "
                ":address, :exit_code, :reason, :started_at, :ended_at, :when) "
                "ON CONFLICT (job_id, name) DO UPDATE SET state = excluded.state, "
                "attempt = excluded.attempt, restarts = excluded.restarts, pid = excluded.pid, "
                "host = excluded.host, address = excluded.address, exit_code = excluded.exit_code, "
                "reason = excluded.reason, started_at = excluded.started_at, "
                "ended_at = excluded.ended_at, updated_at = excluded.updated_at",
                {**task, "job_id": job_id, "when": when},
            )
            db.execute(
                "INSERT INTO attempts (job_id, task, attempt, state, pid, started_at, ended_at, "
                "exit_code, reason) VALUES (:job_id, :name, :attempt, :state, :pid, :started_at, "
                ":ended_at, :exit_code, :reason) ON CONFLICT (job_id, task, attempt) DO UPDATE SET "
                "state = excluded.state, pid = excluded.pid, started_at = excluded.started_at, "
                "ended_at = excluded.ended_at, exit_code = excluded.exit_code, reason = excluded.reason",
                {**task, "job_id": job_id},
            )
            db.execute(
                "INSERT INTO transitions (job_id, task, attempt, state, time, exit_code, reason) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job_id, task["name"], task["attempt"], task["state"], when, task["exit_code"],
                 task["reason"]),
            )
            if restarts_used is not None:
                db.execute("UPDATE jobs SET restarts_used = ? WHERE id = ?", (restarts_used, job_id))

        self.write("update", update)

    def task_progress(self, job_id: str, task: str, attempt: int, when: float,
                      data: dict[str, Any]) -> None:
        text = json.dumps(data)

        def update(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO progress (job_id, task, attempt, time, data) VALUES (?, ?, ?, ?, ?)",
                (job_id, task, attempt, when, text),
            )
            db.execute(
                "UPDATE tasks SET progress = ?, updated_at = ? WHERE job_id = ? AND name = ?",
                (text, when, job_id, task),
            )

        self.write("update", update)

    # -- reading -------------------------------------------------------------------------

    def jobs(self) -> list[dict[str, Any]]:
        """Every job, newest first, with ``state`` made effective (``lost``) and task counts."""
        rows = self.read(
            "read",
            "SELECT j.*, (SELECT COUNT(*) FROM tasks t WHERE t.job_id = j.id) AS task_count, "
            "(SELECT COUNT(*) FROM tasks t WHERE t.job_id = j.id AND t.state = 'running') "
            "AS tasks_running FROM jobs j ORDER BY j.submitted_at DESC, j.id DESC",
        )
        now = time.time()
        for row in rows:
            _decode(row)
            row["recorded_state"] = row["state"]
            row["state"] = effective_state(row, now)
        return rows

    def job(self, ref: str) -> dict[str, Any]:
        """The job whose id is ``ref`` or starts with it (a unique prefix)."""
        rows = self.read("read", "SELECT * FROM jobs WHERE id = ?", (ref,))
        if not rows:
            like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self.read(
                "read", "SELECT * FROM jobs WHERE id LIKE ? ESCAPE '\\' ORDER BY id", (like,)
            )
        if not rows:
            raise StoreError(f"no job '{ref}' in {self.path}; `tfdist list` shows the jobs")
        if len(rows) > 1:
            names = ", ".join(r["id"] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
            raise StoreError(f"'{ref}' matches {len(rows)} jobs ({names}); give more of the id")
        row = _decode(rows[0])
        row["recorded_state"] = row["state"]
        row["state"] = effective_state(row)
        return row

    def job_id_for_run_dir(self, run_dir: str) -> str | None:
        rows = self.read("read", "SELECT id FROM jobs WHERE run_dir = ?", (run_dir,))
        return str(rows[0]["id"]) if rows else None

    def tasks(self, job_id: str) -> list[dict[str, Any]]:
        rows = self.read(
            "read", "SELECT * FROM tasks WHERE job_id = ? ORDER BY role = 'chief' DESC, "
            "role = 'worker' DESC, role = 'ps' DESC, role, idx", (job_id,)
        )
        for row in rows:
            row["progress"] = json.loads(row["progress"]) if row["progress"] else {}
        return rows

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        return self.read(
            "read", "SELECT * FROM attempts WHERE job_id = ? ORDER BY task, attempt", (job_id,)
        )

    def transitions(self, job_id: str) -> list[dict[str, Any]]:
        return self.read(
            "read", "SELECT * FROM transitions WHERE job_id = ? ORDER BY id", (job_id,)
        )

    def progress(self, job_id: str) -> list[dict[str, Any]]:
        rows = self.read(
            "read", "SELECT task, attempt, time, data FROM progress WHERE job_id = ? ORDER BY id",
            (job_id,),
        )
        return [{"time": r["time"], "task": r["task"], "attempt": r["attempt"],
                 **json.loads(r["data"])} for r in rows]


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    for key in ("root_cause", "metrics"):
        if isinstance(row.get(key), str):
            row[key] = json.loads(row[key])
    return row
