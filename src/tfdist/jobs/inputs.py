"""The job's data in the job store: which input files each task got, bounded.

A job's plan can name millions of files (``data.json`` in its run directory keeps them all);
the store keeps the view that is shown (:func:`tfdist.data.plan.summary`): on the job's row
(``jobs.data``) each input's totals, the outputs and their writer; in ``task_inputs`` one row
per task and input with how many files, their bytes and the first few URIs. So a 1,000-task
job costs 1,000 short rows per input, and a page reads only the tasks it shows. How long each
task's staging took is its last progress's ``staging`` (the supervisor keeps it there:
tfdist.supervisor.loop), stored with the task like its other progress.

The store may be a team's PostgreSQL, written by others: what is read back is checked for
shape here and made safe to show where it is shown (tfdist.data.shown).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfdist.data.plan import summary
from tfdist.data.shown import count
from tfdist.jobs.dialect import Db
from tfdist.jobs.records import decode_json

if TYPE_CHECKING:
    from tfdist.jobs.store import JobRef, Op, Store

#: Task names asked for in one ``IN (...)`` (the page asks for at most its 100 rows).
CHUNK = 100


def op_job_data(job: str | JobRef, shown: Mapping[str, Any]) -> Op:
    """Record a job's data (``shown``: :func:`tfdist.data.plan.summary` of its plan),
    replacing what was recorded before."""
    from tfdist.jobs.store import _id

    head = json.dumps({k: shown.get(k) for k in ("inputs", "outputs", "writer")}, sort_keys=True)
    rows = [(task, name, int(got["files"]), got.get("bytes"), json.dumps(list(got.get("first") or ())))
            for task, inputs in (shown.get("tasks") or {}).items() for name, got in inputs.items()]

    def update(db: Db) -> None:
        job_id = _id(job)
        db.execute("UPDATE jobs SET data = ? WHERE id = ?", (head, job_id))
        db.execute("DELETE FROM task_inputs WHERE job_id = ?", (job_id,))
        for row in rows:
            db.execute("INSERT INTO task_inputs (job_id, task, input, files, bytes, first) "
                       "VALUES (?, ?, ?, ?, ?, ?)", (job_id, *row))

    return update


def job_data(store: Store, job_id: str, tasks: Sequence[str]) -> dict[str, Any] | None:
    """The recorded data of a job, as :func:`tfdist.data.plan.summary` gives it, with the
    files of ``tasks`` only (in that order; the ones that got none left out) and
    ``tasks_total``, how many tasks got files; None for a job recorded without data (or
    before stores kept it)."""
    rows = store.read("read", "SELECT data FROM jobs WHERE id = ?", (job_id,))
    head = decode_json(rows[0]["data"], f"the data of job {job_id}") if rows else None
    if not isinstance(head, dict):
        return None
    got: dict[str, dict[str, dict[str, Any]]] = {}
    wanted = list(dict.fromkeys(tasks))
    for i in range(0, len(wanted), CHUNK):
        part = wanted[i:i + CHUNK]
        marks = ", ".join("?" for _ in part)
        for r in store.read("read", "SELECT task, input, files, bytes, first FROM task_inputs "
                            f"WHERE job_id = ? AND task IN ({marks}) ORDER BY task, input",
                            (job_id, *part)):
            first = decode_json(r["first"], f"the files of task {r['task']} of job {job_id}")
            got.setdefault(str(r["task"]), {})[str(r["input"])] = {
                "files": count(r["files"]) or 0, "bytes": count(r["bytes"]),
                "first": [str(u) for u in first if isinstance(u, str)] if isinstance(first, list) else []}
    total = store.read("read", "SELECT COUNT(DISTINCT task) AS n FROM task_inputs WHERE job_id = ?",
                       (job_id,))[0]["n"]
    # the job's row, checked for shape as a data.json is (anything may be in a shared store)
    shown = summary({k: head.get(k) for k in ("inputs", "outputs", "writer")})
    return {**shown, "tasks": {t: got[t] for t in wanted if t in got}, "tasks_total": int(total or 0)}
