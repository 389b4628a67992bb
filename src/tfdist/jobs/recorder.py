"""Writes a running job to the job store: an observer of the supervisor."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfdist.errors import StoreError
from tfdist.jobs.liveness import process_start
from tfdist.jobs.store import Store
from tfdist.states import JobState
from tfdist.supervisor.observer import JobSnapshot, Observer, TaskSnapshot

if TYPE_CHECKING:
    from tfdist.spec import JobSpec
    from tfdist.supervisor.loop import JobResult


def task_row(task: TaskSnapshot) -> dict[str, Any]:
    """A task snapshot as the store's ``tasks`` row."""
    return {
        "name": task.name,
        "role": task.role,
        "index": task.index,
        "state": task.state.value,
        "attempt": task.attempt,
        "restarts": task.restarts,
        "pid": task.pid,
        "host": task.host,
        "address": task.address,
        "exit_code": task.exit_code,
        "reason": task.reason,
        "started_at": task.started_at,
        "ended_at": task.ended_at,
    }


class JobRecorder(Observer):
    """Records the job, each task transition, progress report and the end in the store."""

    def __init__(self, store: Store, job_id: str) -> None:
        self.store = store
        self.job_id = job_id

    @classmethod
    def start(cls, job: JobSpec, run_dir: Path, backend: str, store: Store | None = None) -> JobRecorder:
        """Record the job as running in this process (a submitted job keeps its id)."""
        store = store or Store()
        pid = os.getpid()
        job_id = store.create_job(
            run_dir.name,
            name=job.name,
            run_dir=str(run_dir),
            backend=backend,
            state=JobState.RUNNING,
            max_restarts=job.restart_budget,
        )
        store.job_running(job_id, pid, process_start(pid))
        return cls(store, job_id)

    def on_transition(self, job: JobSnapshot, task: TaskSnapshot, when: float) -> None:
        self.store.task_transition(self.job_id, task_row(task), round(when, 3), job.restarts_used)

    def on_progress(self, job: JobSnapshot, task: TaskSnapshot, when: float,
                    data: Mapping[str, Any]) -> None:
        self.store.task_progress(self.job_id, task.name, task.attempt, when, dict(data))

    def on_finish(self, job: JobSnapshot, result: JobResult) -> None:
        cause = asdict(result.root_cause) if result.root_cause else None
        self.store.job_finished(
            self.job_id,
            state=result.state,
            exit_code=result.exit_code,
            restarts_used=result.restarts_used,
            root_cause=cause,
            metrics=result.metrics,
            ended_at=result.ended_at,
        )

    def aborted(self, err: BaseException) -> None:
        """The supervisor raised before it could finish (e.g. no port to reserve)."""
        with contextlib.suppress(StoreError):
            self.store.mark(self.job_id, JobState.FAILED, f"{type(err).__name__}: {err}")


def recorder_for(job: JobSpec, run_dir: Path, backend: str) -> JobRecorder | None:
    """A recorder, or None (with a one-line warning) when the store cannot be used: a broken
    store must not stop a foreground job from running."""
    try:
        return JobRecorder.start(job, run_dir, backend)
    except StoreError as err:
        print(f"tfdist: warning: this job is not recorded: {err}", file=sys.stderr)
        return None
