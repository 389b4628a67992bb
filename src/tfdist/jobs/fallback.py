"""When the job store missed something, the run directory's own record decides.

The supervisor writes ``events.jsonl`` (every task transition, as it happens) and
``summary.json`` (when the run ends) to the run directory itself, independent of the job
store. The store can fall behind: locked by another process or on a full disk for longer
than the job ran, its last writes never land. Reading it alone would then show a job that
succeeded as ``running`` and, once its supervisor exits, as ``lost``. So for a job the store
still has as active:

- a ``summary.json`` in its run directory is the job's end (a job whose summary says
  succeeded is succeeded), with the summary's task states;
- ``events.jsonl`` lines newer than a task's row are that task's state (and a task the store
  has no row for yet is shown from them);
- only with neither is a job whose supervisor is gone ``lost``.

A damaged or half-written file is skipped (its valid lines are used), never an error: it
is a second opinion, and the store's own answer stands without it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tfdist import runs
from tfdist.contract import ROLES
from tfdist.jobs.liveness import effective_state
from tfdist.jobs.records import JobRecord
from tfdist.states import ENDED_TASK_STATES, JobState, TaskState
from tfdist.supervisor.status import TaskStatus


def read_summary(run_dir: str | None) -> dict[str, Any] | None:
    """The run's ``summary.json``, or None (none yet, unreadable, not a summary)."""
    if not run_dir:
        return None
    try:
        data = json.loads((Path(run_dir) / runs.SUMMARY).read_text(encoding="utf-8"))
        JobState(data["state"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data if isinstance(data, dict) else None


def read_events(run_dir: str | None) -> dict[str, dict[str, Any]]:
    """The last transition of each task in ``events.jsonl`` (bad lines skipped)."""
    last: dict[str, dict[str, Any]] = {}
    if not run_dir:
        return last
    try:
        text = (Path(run_dir) / runs.EVENTS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return last
    for line in text.splitlines():
        try:
            row = json.loads(line)
            TaskState(row["state"])
            name, when = str(row["task"]), float(row["time"])
        except (ValueError, KeyError, TypeError):
            continue
        seen = last.setdefault(name, {})
        seen.update({k: v for k, v in row.items() if k in ("pid", "exit_code", "reason")})
        seen.update(state=row["state"], attempt=row.get("attempt", 0), time=when)
    return last


def effective_job(job: JobRecord, now: float | None = None) -> JobRecord:
    """The job as it should be shown: the store's, its run's summary if the store missed the
    end, or ``lost`` when its supervisor is gone and nothing recorded an end."""
    if not job.stored_state.active:
        return job
    summary = read_summary(job.run_dir)
    if summary is None:
        state = effective_state(job, now)
        return job if state is job.state else dataclasses.replace(job, state=state)
    state = JobState(summary["state"])
    if state is JobState.INTERRUPTED and job.stop_requested:
        state = JobState.STOPPED
    cause, metrics, gp = summary.get("root_cause"), summary.get("metrics"), summary.get("goodput")
    return dataclasses.replace(
        job,
        state=state,
        started_at=job.started_at or summary.get("started_at"),
        ended_at=summary.get("ended_at") or job.ended_at,
        exit_code=state.exit_code,
        restarts_used=summary.get("restarts_used", job.restarts_used),
        root_cause=cause if isinstance(cause, dict) else job.root_cause,
        metrics=metrics if isinstance(metrics, dict) and metrics else job.metrics,
        goodput=gp if isinstance(gp, dict) else job.goodput,
    )


def _split(name: str) -> tuple[str, int]:
    role, _, index = name.rpartition("-")
    return (role, int(index)) if index.isdigit() else (name, 0)


def _order(task: TaskStatus) -> tuple[int, str, int]:
    rank = ROLES.index(task.role) if task.role in ROLES else len(ROLES)
    return rank, task.role, task.index


def effective_tasks(job: JobRecord, tasks: list[TaskStatus]) -> list[TaskStatus]:
    """The tasks as they should be shown (see the module docstring); a lost job's tasks
    that were not over are ``lost`` too, since nobody watches them any more."""
    out = {t.name: t for t in tasks}
    if job.stored_state.active:
        for name, ev in read_events(job.run_dir).items():
            row = out.get(name)
            if row is not None and (row.updated_at or 0) >= ev["time"] - 1e-3:
                continue
            role, index = (row.role, row.index) if row else _split(name)
            base = row or TaskStatus(name=name, role=role, index=index)
            out[name] = dataclasses.replace(
                base, state=TaskState(ev["state"]), attempt=ev["attempt"],
                pid=ev.get("pid", base.pid), exit_code=ev.get("exit_code", base.exit_code),
                reason=ev.get("reason", base.reason), updated_at=ev["time"],
            )
        summary = read_summary(job.run_dir)
        for row in summary.get("tasks", []) if summary else []:
            if not isinstance(row, dict) or row.get("name") not in out:
                continue
            try:
                state = TaskState(row["state"])
            except (ValueError, KeyError):
                continue
            known = out[row["name"]]
            out[known.name] = dataclasses.replace(
                known, state=state, exit_code=row.get("exit_code", known.exit_code),
                restarts=row.get("restarts", known.restarts), pid=row.get("pid", known.pid),
                address=row.get("address", known.address),
            )
    recorded = {t.name for t in tasks}
    result = [out[t.name] for t in tasks] + sorted(
        (t for n, t in out.items() if n not in recorded), key=_order)
    if job.state is JobState.LOST:
        result = [t if t.state in ENDED_TASK_STATES else dataclasses.replace(t, state=TaskState.LOST)
                  for t in result]
    return result
