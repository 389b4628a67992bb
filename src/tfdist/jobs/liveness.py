"""Is a job's supervisor still there? A job the store says is active whose supervisor no longer
exists (SIGKILL, reboot) is shown as ``lost``: the pid must exist *and* have the same start
time, so a reused pid does not count."""

from __future__ import annotations

import functools
import os
import time
from typing import TYPE_CHECKING

from tfdist.states import JobState

if TYPE_CHECKING:
    from tfdist.jobs.records import JobRecord

#: A submitted job whose supervisor never registered within this many seconds is lost.
SUBMIT_GRACE_SECONDS = 60.0


def process_start(pid: int) -> float | None:
    """The start time of process ``pid`` (as psutil's create_time), or None if it is gone.

    On Linux it is read from ``/proc`` (what psutil reads too): every ``tfdist run``
    registers its own start, and importing psutil for that cost 7 ms of a 0.15 s launch.
    """
    try:
        return _proc_start(pid)
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.Error, OSError):
        return None


def _proc_start(pid: int) -> float | None:
    """Boot time plus the process's start in clock ticks (``/proc/PID/stat`` field 22)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        if os.path.isdir("/proc/self"):
            return None  # /proc works: the process is gone
        raise
    fields = stat[stat.rindex(b")") + 2 :].split()  # the name may hold spaces and ")"
    if fields[0] == b"Z":
        return None
    return _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")


@functools.cache
def _boot_time() -> float:
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise ValueError("no btime in /proc/stat")


def supervisor_alive(pid: int | None, start: float | None) -> bool:
    """Does the process that registered as supervisor still run (same pid, same start)?"""
    if not pid:
        return False
    now_start = process_start(pid)
    if now_start is None:
        return False
    return start is None or abs(now_start - start) < 1.0


def effective_state(job: JobRecord, now: float | None = None) -> JobState:
    """The state to show: ``lost`` for an active job whose supervisor is gone."""
    state = job.stored_state
    if not state.active:
        return state
    if job.supervisor_pid is None:
        too_old = (now or time.time()) - (job.submitted_at or 0) > SUBMIT_GRACE_SECONDS
        return JobState.LOST if too_old else state
    alive = supervisor_alive(job.supervisor_pid, job.supervisor_start)
    return state if alive else JobState.LOST
