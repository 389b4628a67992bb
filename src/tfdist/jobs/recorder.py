"""Writes a running job to the job store: an observer of the supervisor.

The hooks run on the supervisor's thread, so they only build an operation and hand it to
the :class:`~tfdist.jobs.writer.StoreWriter` (never a store write here: a locked store or a
full disk must not stop the supervisor from acting on task exits). Even the job's own row is
created by the writer, so a store locked when the job starts only delays the record.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfdist.errors import StoreError, TfdistError, warn
from tfdist.jobs import faults
from tfdist.jobs.store import (
    JobRef,
    Store,
    op_create_job,
    op_job_finished,
    op_job_goodput,
    op_job_phase,
    op_job_running,
    op_job_started_at,
    op_mark,
    op_task_progress,
    op_task_transition,
)
from tfdist.jobs.usage import Thinning, op_task_usage
from tfdist.jobs.writer import StoreWriter
from tfdist.node.usage import UsageSample, latest
from tfdist.pids import start_time
from tfdist.states import JobState, PhaseState
from tfdist.supervisor.observer import JobSnapshot, Observer
from tfdist.supervisor.status import TaskStatus

if TYPE_CHECKING:
    from tfdist.backends.base import Usage
    from tfdist.data.plan import DataPlan
    from tfdist.jobspec.model import JobSpec
    from tfdist.supervisor.result import JobResult

#: Each write attempt of the writer waits at most this long for a lock, then backs off and
#: retries (so that closing is never stuck in one long wait).
WRITER_BUSY_TIMEOUT = 1.0
#: The least the end of a run waits for its last records (``TFDIST_STORE_TIMEOUT=0`` must not
#: mean "give up on the record at once").
MIN_CLOSE_WAIT = 2.0


class JobRecorder(Observer):
    """Records the job, each task transition, progress report and the end in the store."""

    def __init__(self, store: Store, ref: JobRef, writer: StoreWriter | None = None) -> None:
        self.store = store
        self.ref = ref
        self.writer = writer or StoreWriter(store)
        self._latest: dict[str, tuple[TaskStatus, float]] = {}
        self._thinning: dict[str, Thinning] = {}  # which usage samples each task keeps
        self._usage: dict[str, dict[str, Any]] = {}  # each task's latest use and peaks

    @property
    def job_id(self) -> str | None:
        """The job's id once the writer has recorded it."""
        return self.ref.id

    @classmethod
    def start(cls, job: JobSpec, run_dir: Path, backend: str, store: Store | None = None,
              data: DataPlan | None = None) -> JobRecorder:
        """Record the job as running in this process (a submitted job keeps its id), with
        which files each task got when it has ``data`` (its plan, bounded: tfdist.jobs.inputs)."""
        store = store or Store(timeout=min(faults.busy_timeout(), WRITER_BUSY_TIMEOUT))
        ref = JobRef()
        recorder = cls(store, ref)
        pid = os.getpid()
        recorder.writer.submit(op_create_job(
            run_dir.name, name=job.name, run_dir=str(run_dir), backend=backend,
            state=JobState.RUNNING, max_restarts=job.restart_budget, ref=ref,
            labels=job.labels), final=True)
        recorder.writer.submit(op_job_running(ref, pid, start_time(pid)), final=True)
        if data is not None:
            from tfdist.data.plan import summary
            from tfdist.jobs.inputs import op_job_data

            recorder.writer.submit(op_job_data(ref, summary(data.to_dict())), final=True)
        return recorder

    def on_start(self, job: JobSnapshot, tasks: tuple[TaskStatus, ...]) -> None:
        # replayed to a record made after the tasks started: the job began before it
        self.writer.submit(op_job_started_at(self.ref, round(job.started_at, 3)))
        self.writer.submit(op_job_phase(self.ref, job.phase))

    def on_phase(self, job: JobSnapshot, when: float) -> None:
        self.writer.submit(op_job_phase(self.ref, job.phase), final=job.phase is PhaseState.ENDED)

    def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
        when = round(when, 3)
        self._latest[task.name] = (task, when)
        self.writer.submit(op_task_transition(self.ref, task, when, job.restarts_used))

    def on_progress(self, job: JobSnapshot, task: TaskStatus, when: float,
                    data: Mapping[str, Any]) -> None:
        self.writer.submit(op_task_progress(self.ref, task.name, task.attempt, when, data, task.progress))

    def on_usage(self, job: JobSnapshot, task: TaskStatus, usage: Usage) -> None:
        sample = UsageSample(usage.time, usage.cpu, usage.rss, usage.limit, usage.charged)
        now = self._usage[task.name] = latest(self._usage.get(task.name), sample)
        if self.writer.backlog > self.writer.max_pending // 2:
            return  # a store that falls behind: samples are the first to wait (the next carries the peaks)
        seq, thin = self._thinning.setdefault(task.name, Thinning()).add()
        self.writer.submit(op_task_usage(self.ref, task.name, task.attempt, seq, thin,
                                         sample.to_dict(), now))

    def on_goodput(self, job: JobSnapshot, data: Mapping[str, Any]) -> None:
        if self.writer.backlog <= self.writer.max_pending // 2:  # else the next one tells it
            self.writer.submit(op_job_goodput(self.ref, data))

    def on_finish(self, job: JobSnapshot, result: JobResult) -> None:
        if self.writer.dropped:  # some transitions never reached the store: set the last state
            for record, when in self._latest.values():
                self.writer.submit(op_task_transition(self.ref, record, when, history=False),
                                   final=True)
        cause = asdict(result.root_cause) if result.root_cause else None
        self.writer.submit(op_job_finished(
            self.ref, state=result.state, exit_code=result.exit_code,
            restarts_used=result.restarts_used, root_cause=cause, metrics=result.metrics,
            ended_at=result.ended_at, goodput=result.goodput), final=True)

    def stop_requested(self) -> bool:
        """Whether someone asked for this job to stop (``tfdist stop``, the dashboard): its
        SIGTERM then ends it as ``stopped``, not ``interrupted``. False when the store cannot
        say (a store that fails must not change how a job ends)."""
        if self.ref.id is None:
            return False
        try:
            with contextlib.closing(Store(self.store.location)) as store:
                return store.job(self.ref.id).stop_requested is not None
        except TfdistError:
            return False

    def aborted(self, err: BaseException) -> None:
        """The supervisor raised before it could finish (e.g. no port to reserve)."""
        self.writer.submit(op_mark(self.ref, JobState.FAILED, f"{type(err).__name__}: {err}"),
                           final=True)

    def close(self, timeout: float | None = None) -> bool:
        """Wait for the record to be written (at most ``timeout``, default the store's busy
        timeout, ``TFDIST_STORE_TIMEOUT``, but at least :data:`MIN_CLOSE_WAIT`); True if all of
        it was."""
        if timeout is None:  # a free store takes milliseconds; only a locked one waits this long
            timeout = max(faults.busy_timeout(), MIN_CLOSE_WAIT)
        if not self.writer.flush(min(timeout, 0.5)) and self.writer.last_error and timeout > 0.5:
            # say why the end of the run waits (a foreground run would seem to hang)
            print(f"tfdist: waiting up to {timeout:g}s to record this job: "
                  f"{self.writer.last_error}", file=sys.stderr, flush=True)
        done = self.writer.close(timeout)
        if not self.writer.running:  # else it may still be inside a write: leave it be
            self.store.close()
        return done


def recorder_for(job: JobSpec, run_dir: Path, backend: str,
                 data: DataPlan | None = None) -> JobRecorder | None:
    """A recorder, or None (with a one-line warning) when the store cannot be used: a broken
    store must not stop a foreground job from running."""
    try:
        return JobRecorder.start(job, run_dir, backend, data=data)
    except StoreError as err:
        warn(f"this job is not recorded: {err}")
        return None
