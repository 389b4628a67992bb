"""Is the process with this pid still the one we recorded? A pid plus its start time.

A pid alone names a process only until it exits: the kernel hands the number to the next
process. So whoever records a process (the job store its supervisor, a cached environment
the job using it) records its start time as well, and later asks :func:`same_process`.

**One tolerance, and why it is 1.5 s.** On Linux the start time is the boot time plus the
process's start in clock ticks since boot (10 ms each). The ticks never change, but the boot
time (``btime`` in ``/proc/stat``) is whole seconds of the wall clock minus the time since
boot, so it moves when the wall clock is set (an NTP step): a small step across a second
boundary makes the reading of the process that recorded and that of a later one that checks
differ by exactly one second. A tolerance under a second (the environment cache had 10 ms)
then calls a live process gone, which deletes an environment in use or shows a running job
as lost; 1.5 s absorbs the one-second step with room for float rounding. The opposite
mistake needs the kernel to give the same pid to a new process within 1.5 s of the old one's
start, that is the whole pid range (``pid_max``) cycling in that time.
"""

from __future__ import annotations

import functools
import os

#: How far apart two readings of one process's start time may be (see the module docstring).
START_TOLERANCE_SECONDS = 1.5


def start_time(pid: int) -> float | None:
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


def same_process(pid: int | None, start: float | None) -> bool:
    """Does the process recorded as (``pid``, ``start``) still run? A start of None (not
    recorded) trusts the pid alone."""
    if not pid:
        return False
    now = start_time(pid)
    if now is None:
        return False
    return start is None or abs(now - start) < START_TOLERANCE_SECONDS


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
