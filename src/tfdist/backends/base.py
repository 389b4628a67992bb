"""What every backend does, and the events it reports to the supervisor.

A backend owns the places tasks run (processes, pods, actors). The supervisor knows none
of that: it calls :meth:`Backend.reserve`, :meth:`Backend.start` and :meth:`Backend.stop`,
and reads :class:`Event` objects from :attr:`Backend.events`. Backends push every event the
moment it happens (no polling interval), so a task's exit is noticed within milliseconds.
"""

from __future__ import annotations

import json
import queue
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdist.cluster import PROGRESS_PREFIX, Task, TaskId
from tfdist.spec import JobSpec


@dataclass(frozen=True)
class Started:
    task: str
    attempt: int
    time: float
    pid: int | None = None
    host: str | None = None


@dataclass(frozen=True)
class Exited:
    """A task ended. ``exit_code`` is negative -N when it died of signal N."""

    task: str
    attempt: int
    time: float
    exit_code: int
    reason: str | None = None  # backend detail, e.g. OOMKilled, node died
    #: The backend cannot run this task again (e.g. it would need an address the job's
    #: TF_CONFIG does not have): no restart policy retries it.
    final: bool = False


@dataclass(frozen=True)
class Output:
    task: str
    attempt: int
    time: float
    line: str


@dataclass(frozen=True)
class Progress:
    task: str
    attempt: int
    time: float
    data: dict[str, Any] = field(default_factory=dict)


Event = Started | Exited | Output | Progress


def progress_data(line: str) -> dict[str, Any] | None:
    """The data of a ``TFDIST_PROGRESS {json}`` line, or None for ordinary output."""
    if not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        data = json.loads(line[len(PROGRESS_PREFIX) :])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def line_event(task: str, attempt: int, time: float, line: str) -> Output | Progress:
    """One line of a task's output as the event every backend reports for it."""
    data = progress_data(line)
    return Output(task, attempt, time, line) if data is None else Progress(task, attempt, time, data)


class Backend(ABC):
    """Start, watch and stop the tasks of one job."""

    name: str = "base"

    def __init__(self, job: JobSpec, run_dir: Path) -> None:
        self.job = job
        self.run_dir = run_dir
        self.events: queue.Queue[Event] = queue.Queue()

    def check(self) -> None:
        """Raise SpecError for what this backend cannot run, before anything starts."""

    @abstractmethod
    def reserve(self, tasks: list[TaskId]) -> dict[str, str]:
        """Reserve an address (``host:port``) for each training task; return them by name."""

    @abstractmethod
    def start(self, task: Task, attempt: int) -> None:
        """Start one attempt of a task; report Started, Output, Progress and Exited events."""

    @abstractmethod
    def stop(self, names: list[str], grace: float) -> None:
        """Stop these tasks: polite signal, ``grace`` seconds, then force. Blocks until done;
        each stopped task still reports its Exited event."""

    def close(self) -> None:
        """Release everything (ports, connections). Called once, after all tasks ended."""
