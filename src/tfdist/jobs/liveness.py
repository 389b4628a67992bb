"""Is a job's supervisor still there? A job the store says is active whose supervisor no longer
exists (SIGKILL, reboot) is shown as ``lost``: the pid must exist *and* have the same start
time (:mod:`tfdist.pids`), so a reused pid does not count."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tfdist.pids import same_process
from tfdist.states import JobState

if TYPE_CHECKING:
    from tfdist.jobs.records import JobRecord

#: A submitted job whose supervisor never registered within this many seconds is lost.
SUBMIT_GRACE_SECONDS = 60.0


def effective_state(job: JobRecord, now: float | None = None) -> JobState:
    """The state to show: ``lost`` for an active job whose supervisor is gone."""
    state = job.stored_state
    if not state.active:
        return state
    if job.supervisor_pid is None:
        too_old = (now or time.time()) - (job.submitted_at or 0) > SUBMIT_GRACE_SECONDS
        return JobState.LOST if too_old else state
    alive = same_process(job.supervisor_pid, job.supervisor_start)
    return state if alive else JobState.LOST
