"""Is a job's supervisor still there? A job the store says is active whose supervisor no longer
exists (SIGKILL, reboot) is shown as ``lost``: the pid must exist *and* have the same start
time, so a reused pid does not count."""

from __future__ import annotations

import time
from typing import Any

from tfdist.states import ACTIVE_JOB_STATES

#: A submitted job whose supervisor never registered within this many seconds is lost.
SUBMIT_GRACE_SECONDS = 60.0


def process_start(pid: int) -> float | None:
    """The start time of process ``pid`` (psutil's create_time), or None if it is gone."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.Error, OSError):
        return None


def supervisor_alive(pid: int | None, start: float | None) -> bool:
    """Does the process that registered as supervisor still run (same pid, same start)?"""
    if not pid:
        return False
    now_start = process_start(pid)
    if now_start is None:
        return False
    return start is None or abs(now_start - start) < 1.0


def effective_state(job: dict[str, Any], now: float | None = None) -> str:
    """The state to show: ``lost`` for an active job whose supervisor is gone."""
    state = job["state"]
    if state not in ACTIVE_JOB_STATES:
        return state
    if job.get("supervisor_pid") is None:
        submitted = job.get("submitted_at") or 0
        too_old = (now or time.time()) - submitted > SUBMIT_GRACE_SECONDS
        return "lost" if too_old else state
    return state if supervisor_alive(job["supervisor_pid"], job["supervisor_start"]) else "lost"
