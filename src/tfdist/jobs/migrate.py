"""Copy a job history from one store into another: ``tfdist store migrate --to URL``, to
bring one user's SQLite history into a team's PostgreSQL store.

Every row of every table is copied in one transaction of the target (it lands whole or not
at all), in the order the source recorded it, so transitions and progress reports keep
their order (their numeric ids are the target's own). A job whose id the target already
has is skipped with its rows, so running the command twice copies nothing twice; jobs
recorded before stores knew their user are the source file's owner's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tfdist.jobs.dialect import Db
from tfdist.jobs.store import Store

#: Each table, its columns (all but an auto-numbered id) and the order rows were recorded.
TABLES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("jobs", "submitted_at, id", (
        "id", "name", "state", "backend", "run_dir", "detached", "supervisor_pid",
        "supervisor_start", "submitted_at", "started_at", "ended_at", "exit_code",
        "restarts_used", "max_restarts", "root_cause", "metrics", "stop_requested",
        "tensorboard_url", "username", "goodput", "phase", "labels", "data")),
    ("tasks", "job_id, name", (
        "job_id", "name", "role", "idx", "state", "attempt", "restarts", "pid", "host",
        "address", "exit_code", "reason", "started_at", "ended_at", "progress", "updated_at",
        "resource_use")),
    ("attempts", "job_id, task, attempt", (
        "job_id", "task", "attempt", "state", "pid", "started_at", "ended_at", "exit_code",
        "reason")),
    ("transitions", "id", ("job_id", "task", "attempt", "state", "time", "exit_code", "reason")),
    ("progress", "id", ("job_id", "task", "attempt", "time", "data")),
    ("task_inputs", "job_id, task, input", ("job_id", "task", "input", "files", "bytes", "first")),
    ("usage_samples", "job_id, task, seq", ("job_id", "task", "seq", "attempt", "time", "cpu", "rss",
                                            "mem_limit", "charged")),
)
#: Rows read from the source at a time (a long history is never held whole).
PAGE = 5000


@dataclass
class Migration:
    """What was copied (rows per table) and the jobs skipped as already there."""

    copied: dict[str, int] = field(default_factory=dict)
    skipped_jobs: int = 0


def _pages(source: Store, table: str, order: str, columns: tuple[str, ...]) -> Iterator[list[dict[str, Any]]]:
    offset = 0
    while True:
        rows = source.read(f"read {table} from", f"SELECT {', '.join(columns)} FROM {table} "
                           f"ORDER BY {order} LIMIT ? OFFSET ?", (PAGE, offset))
        if not rows:
            return
        yield rows
        offset += len(rows)


def migrate(source: Store, target: Store) -> Migration:
    """Copy every job of ``source`` that ``target`` does not have (see the module doc)."""
    result = Migration()
    have = {str(r["id"]) for r in target.read("read", "SELECT id FROM jobs")}

    def copy(db: Db) -> None:
        skipped: set[str] = set()
        for table, order, columns in TABLES:
            key = "id" if table == "jobs" else "job_id"
            sql = (f"INSERT INTO {table} ({', '.join(columns)}) "
                   f"VALUES ({', '.join('?' for _ in columns)})")
            count = 0
            for rows in _pages(source, table, order, columns):
                for row in rows:
                    if str(row[key]) in have:
                        if table == "jobs":
                            skipped.add(str(row[key]))
                        continue
                    db.execute(sql, tuple(row[c] for c in columns))
                    count += 1
            result.copied[table] = count
        result.skipped_jobs = len(skipped)

    target.write("copy the history into", copy)
    return result
