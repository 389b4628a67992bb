"""The dashboard's queries of the job store: a page of jobs filtered and limited in SQL, the
backends to filter by, and a cheap mark of what changed. Written once for both databases,
like the rest of :mod:`tfdist.jobs.store`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tfdist.jobs.fallback import effective_job
from tfdist.jobs.records import JobRecord, TransitionRecord, decode_json
from tfdist.jobs.store import Store
from tfdist.states import JobState, TaskState


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a page shows (the dashboard's filters): each field narrows, None does not.
    ``name`` and ``user`` match a part of the name (case-insensitive); ``since`` is a time
    (seconds since the epoch) the job was submitted at or after; ``labels`` are (key, value)
    pairs the job has every one of (checked by :func:`tfdist.jobspec.labels.parse` first)."""

    state: JobState | None = None
    backend: str | None = None
    name: str | None = None
    user: str | None = None
    since: float | None = None
    labels: tuple[tuple[str, str], ...] = ()


def _like(text: str) -> str:
    """A LIKE pattern matching ``text`` anywhere, its own wildcards literal (ESCAPE '\\')."""
    return "%" + text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"



def jobs_page(store: Store, where: JobFilter, limit: int, offset: int = 0) -> tuple[list[JobRecord], int]:
    """One page of jobs, newest first, and how many match in all: the query is limited
    in SQL (an index walk of ``jobs_submitted``), so 10,000 jobs cost what 50 do.

    The state filter is on the state shown: an ended state is the stored one, so SQL
    filters it; ``running``, ``submitted`` and ``lost`` depend on whether a supervisor
    still runs, so those are chosen among the jobs stored as active (few at any time)."""
    clauses: list[str] = []
    args: list[Any] = []
    derived = where.state is not None and (where.state.active or where.state is JobState.LOST)
    if where.state is not None:
        states = ([s.value for s in (JobState.SUBMITTED, JobState.RUNNING)] if derived
                  else [where.state.value])
        clauses.append(f"j.state IN ({', '.join('?' for _ in states)})")
        args += states
    if where.backend:
        clauses.append("j.backend = ?")
        args.append(where.backend)
    if where.name:
        clauses.append("LOWER(j.name) LIKE ? ESCAPE '\\'")
        args.append(_like(where.name))
    if where.user:
        clauses.append("LOWER(j.username) LIKE ? ESCAPE '\\'")
        args.append(_like(where.user))
    if where.since is not None:
        clauses.append("j.submitted_at >= ?")
        args.append(where.since)
    for key, value in where.labels:  # stored as '{"k":"v",...}' (tables.MIGRATIONS[6]);
        # REPLACE is case-sensitive in SQLite and PostgreSQL alike (SQLite's LIKE is not)
        clauses.append("REPLACE(j.labels, ?, '') <> j.labels")
        args.append(f'"{key}":"{value}"')
    cond = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    # the lead task's last progress (chief-0 if there is one, else worker-0): two lookups
    # of the tasks' primary key per row, whatever the job's size
    select = ("SELECT j.*, (SELECT COUNT(*) FROM tasks t WHERE t.job_id = j.id) AS task_count, "
              "(SELECT COUNT(*) FROM tasks t WHERE t.job_id = j.id AND t.state = ?) AS tasks_running, "
              "(SELECT t.progress FROM tasks t WHERE t.job_id = j.id AND t.name IN ('chief-0', 'worker-0') "
              "ORDER BY t.name LIMIT 1) AS lead_progress "
              f"FROM jobs j{cond} ORDER BY j.submitted_at DESC, j.id DESC")
    now = time.time()
    if derived:
        rows = [effective_job(r, now) for r in
                store.records("read", select, (TaskState.RUNNING.value, *args))]
        rows = [r for r in rows if r.state is where.state]
        return rows[offset:offset + limit], len(rows)
    total = store.read("read", f"SELECT COUNT(*) AS n FROM jobs j{cond}", tuple(args))[0]["n"]
    rows = store.records("read", select + " LIMIT ? OFFSET ?",
                         (TaskState.RUNNING.value, *args, limit, offset))
    return [effective_job(r, now) for r in rows], int(total)

def lead_progress(store: Store, job_id: str) -> dict[str, Any] | None:
    """The lead task's (chief-0, else worker-0) last progress, as the jobs list has it."""
    rows = store.read("read", "SELECT progress FROM tasks WHERE job_id = ? "
                      "AND name IN ('chief-0', 'worker-0') ORDER BY name LIMIT 1", (job_id,))
    found = decode_json(rows[0]["progress"], f"the last progress of job {job_id}") if rows else None
    return found if isinstance(found, dict) else None


def epoch_reports(store: Store, job_id: str, task: str) -> list[dict[str, Any]]:
    """The first and the last progress report of ``task`` that name an epoch (the time left
    is estimated from them: :func:`tfdist.ui.views.epochs_left`); two index walks."""
    found = []
    for order in ("ASC", "DESC"):
        rows = store.read("read", "SELECT time, data FROM progress WHERE job_id = ? AND task = ? "
                          f"AND data LIKE '%\"epoch\"%' ORDER BY id {order} LIMIT 1", (job_id, task))
        for r in rows:
            data = decode_json(r["data"], f"a progress report of task {task} of job {job_id}")
            if isinstance(data, dict):
                found.append({**data, "time": r["time"]})
    return found


def progress_sample(store: Store, job_id: str, points: int) -> list[dict[str, Any]]:
    """The job's progress reports as :meth:`Store.progress` gives them, oldest first, but at
    most ``points // tasks`` of each task: its every k-th report counted back from its
    latest (always in), k the smallest that fits. Chosen in SQL, so the reports left out are
    never read out of the database (a long job has millions)."""
    tasks = store.read("read", "SELECT COUNT(DISTINCT task) AS n FROM progress WHERE job_id = ?",
                       (job_id,))[0]["n"]
    per_task = max(1, points // max(1, int(tasks or 0)))
    rows = store.read(
        "read", "SELECT task, attempt, time, data FROM (SELECT id, task, attempt, time, data, "
        "ROW_NUMBER() OVER (PARTITION BY task ORDER BY id DESC) - 1 AS back, "
        "COUNT(*) OVER (PARTITION BY task) AS n FROM progress WHERE job_id = ?) s "
        "WHERE back % ((n + ? - 1) / ?) = 0 ORDER BY id", (job_id, per_task, per_task))
    out = []
    for r in rows:
        data = decode_json(r["data"], f"a progress report of task {r['task']} of job {job_id}")
        out.append({"time": r["time"], "task": r["task"], "attempt": r["attempt"],
                    **(data if isinstance(data, dict) else {})})
    return out


def backends(store: Store) -> list[str]:
    """The backends jobs were recorded on (the dashboard's filter choices)."""
    rows = store.read("read", "SELECT DISTINCT backend FROM jobs WHERE backend IS NOT NULL "
                     "ORDER BY backend")
    return [str(r["backend"]) for r in rows]

def changes(store: Store, job_id: str | None = None) -> tuple[Any, ...]:
    """Numbers that change whenever something is recorded (a transition, a progress
    report, a usage sample kept; of one job if given): the dashboard's live pages compare them, cheaply
    (index lookups), to know when to redraw."""
    if job_id is None:
        row = store.read("read", "SELECT (SELECT MAX(id) FROM transitions) AS t, "
                        "(SELECT COUNT(*) FROM jobs) AS j")[0]
        return (row["t"], row["j"])
    row = store.read("read", "SELECT (SELECT MAX(id) FROM transitions WHERE job_id = ?) AS t, "
                    "(SELECT MAX(id) FROM progress WHERE job_id = ?) AS p, "
                    "(SELECT MAX(time) FROM usage_samples WHERE job_id = ?) AS u, "
                    "(SELECT state FROM jobs WHERE id = ?) AS s", (job_id, job_id, job_id, job_id))[0]
    return (row["t"], row["p"], row["u"], row["s"])


def recent_transitions(store: Store, job_id: str, limit: int) -> tuple[list[TransitionRecord], int]:
    """The job's last ``limit`` transitions, oldest first, and how many it has in all: a job
    page's events, whatever the number of tasks and restarts (limited in SQL)."""
    total = store.read("read", "SELECT COUNT(*) AS n FROM transitions WHERE job_id = ?", (job_id,))[0]["n"]
    rows = store.read("read", "SELECT * FROM transitions WHERE job_id = ? ORDER BY id DESC LIMIT ?",
                      (job_id, limit))
    return [TransitionRecord.from_row(r) for r in reversed(rows)], int(total or 0)
