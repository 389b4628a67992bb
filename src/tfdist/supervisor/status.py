"""One task as tfdist saw it at one moment: the one task type every layer shares.

It is an observed snapshot (a ``*Status``), frozen: the supervisor holds one per task and
replaces it at each change (:func:`dataclasses.replace`), so the object it hands to an
observer (the live view reads them from rich's refresh thread, the job store's writer from
its own) can never change or be seen half-updated, and recording a transition copies
nothing. The job store writes its fields as the task's row and reads them back as the same
type; ``summary.json``, the end-of-job report, ``status`` and the Python API are views of it.

The supervisor's own bookkeeping that no view shows (when a task last showed a sign of life,
whether its backend can start it again) stays in the supervisor, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfdist.states import TaskState


@dataclass(frozen=True)
class TaskStatus:
    """What tfdist knows of one task: its state, its current attempt and where it runs."""

    name: str
    role: str
    index: int
    state: TaskState = TaskState.PENDING
    attempt: int = 0
    restarts: int = 0
    pid: int | None = None
    host: str | None = None
    address: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    started_at: float | None = None  # wall clock
    ended_at: float | None = None
    #: The last progress report merged with the ones before (a step report updates the last
    #: epoch report instead of replacing it). Never changed in place: a report makes a new one.
    progress: Mapping[str, Any] = field(default_factory=dict)
    #: Wall clock of the last transition or progress report that made this status.
    updated_at: float | None = None
    #: Its latest resource use and peaks (:func:`tfdist.node.usage.latest`), as the job
    #: store keeps it; the supervisor itself does not hold it.
    usage: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The task as ``status --json`` and ``JobHandle.status()`` show it (``idx`` for the
        index: the keys those have always had)."""
        return {
            "name": self.name, "role": self.role, "idx": self.index,
            "state": self.state.value, "attempt": self.attempt, "restarts": self.restarts,
            "pid": self.pid, "host": self.host, "address": self.address,
            "exit_code": self.exit_code, "reason": self.reason, "started_at": self.started_at,
            "ended_at": self.ended_at, "progress": dict(self.progress),
            "updated_at": self.updated_at, "usage": dict(self.usage),
        }
