"""The states a task and a job can be in, the supervisor's phase of a running job, and how
an exit and the restart budget are told: the words every view, record and test uses (light:
imported by every command).

The enums are ``str`` subclasses, so a state compares equal to (and serialises as) its
value: ``TaskState.RUNNING == "running"``, and JSON and SQLite see plain strings.
"""

from __future__ import annotations

import enum
import signal


class TaskState(str, enum.Enum):
    PENDING = "pending"  # not started yet, or waiting for a restart
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # exited 0 by itself
    FAILED = "failed"  # exited non-zero (or hung) by itself
    STOPPING = "stopping"  # tfdist asked it to stop
    STOPPED = "stopped"  # ended because tfdist stopped it
    LOST = "lost"  # shown, never recorded: its job's supervisor is gone

    def __str__(self) -> str:
        return self.value


class JobState(str, enum.Enum):
    SUBMITTED = "submitted"  # recorded, its detached supervisor not yet running
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # Ctrl-C / SIGTERM on the supervisor
    STOPPED = "stopped"  # interrupted by `tfdist stop`, or killed by it
    LOST = "lost"  # derived when read: recorded as active, but its supervisor is gone

    def __str__(self) -> str:
        return self.value

    @property
    def active(self) -> bool:
        return self in (JobState.SUBMITTED, JobState.RUNNING)

    @property
    def final(self) -> bool:
        """Ended by tfdist's own hand (a lost job is over, but nobody recorded its end)."""
        return self in FINAL_JOB_STATES

    @property
    def exit_code(self) -> int:
        """The exit code of ``tfdist run`` for a job that ended in this state."""
        return {JobState.SUCCEEDED: 0, JobState.INTERRUPTED: 130, JobState.STOPPED: 130}.get(self, 1)


class PhaseState(str, enum.Enum):
    """Where the supervisor of a running job is (tfdist.supervisor.phase holds each phase's
    data and the steps between them): shown by ``status`` and the dashboard."""

    STARTING = "starting"  # tasks started, not all running yet
    RUNNING = "running"
    RESTARTING = "restarting"  # tasks wait out their backoff after a failure
    DRAINING = "draining"  # training succeeded; the last tasks finish
    ENDED = "ended"

    def __str__(self) -> str:
        return self.value


#: Task states a task never leaves by itself.
ENDED_TASK_STATES = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED)
#: Job states tfdist writes when a job ends.
FINAL_JOB_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.INTERRUPTED, JobState.STOPPED)
#: Job states of a job that may still be running.
ACTIVE_JOB_STATES = (JobState.SUBMITTED, JobState.RUNNING)


def describe_exit(code: int | None) -> str:
    """``exit code 3`` or ``killed by SIGKILL``."""
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def size_text(size: int) -> str:
    """Bytes as a person reads them: ``200 MiB``, ``1.5 GiB``, ``300 bytes``."""
    for unit, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit:
            return f"{size // unit} {name}" if size % unit == 0 else f"{size / unit:.1f} {name}"
    return f"{size} bytes"


def bytes_text(n: float) -> str:
    """An amount of data as ``cp`` and ``hdfs dfs -du -h`` count it, in decimal units
    (``15.0 KB``, ``2.6 MB``); memory limits use :func:`size_text`'s binary units, as
    Kubernetes quantities and ``resources.memory`` are written."""
    for unit in ("B", "KB", "MB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def describe_memory_kill(limit: int | None) -> str:
    """Why a task the kernel killed for memory ended, in one line: what happened, the limit,
    and the way out when the model's variables are what does not fit (every backend says it
    the same way: the local cgroup, a YARN container, a Kubernetes pod)."""
    where = f"over its {size_text(limit)} limit" if limit else "over its memory limit"
    return (f"killed for memory: {where} (resources.memory); if the model's variables do not fit "
            "in one task, shard them over parameter servers (strategy: parameter_server) or raise the limit")


def exit_text(code: int | None) -> str:
    """A task's exit in the table of every view (terminal, ``status``, the page): ``3``,
    ``SIGKILL`` or ``-``."""
    if code is None:
        return "-"
    return str(code) if code >= 0 else describe_exit(code).removeprefix("killed by ")


def budget_text(used: int, budget: int) -> str:
    """The restart budget as every view shows it: ``1 of 3 used, 2 left``."""
    return f"{used} of {budget} used, {max(budget - used, 0)} left"
