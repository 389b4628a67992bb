"""What a run ends with: the result ``summary.json`` holds, and the failure that decided it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfdist.states import JobState
from tfdist.supervisor.output import error_line
from tfdist.supervisor.status import TaskStatus


@dataclass
class RootCause:
    """The first failure that decided the job's fate; ``error`` is the task's own word on it
    (its exception, else its last error line: :func:`~tfdist.supervisor.output.error_line`),
    which every report of the cause leads with."""

    task: str
    attempt: int
    exit_code: int | None
    description: str  # "exit code 3", "killed by SIGKILL", "hung: ..."
    time: float  # wall clock
    message: str
    tail: list[str] = field(default_factory=list)
    error: str = ""

    def __post_init__(self) -> None:
        if not self.error:
            self.error = error_line(self.tail)

    def headline(self) -> str:
        """See :func:`headline`."""
        return headline(self.task, self.error, self.description, self.message)


def headline(task: str, error: str, description: str, message: str) -> str:
    """The root cause in one line, leading with the task's own error when it printed one:
    ``worker-1: ValueError: bad label 11 (exit code 1)``; without one, what tfdist saw:
    ``worker-1: exit code 1: restart policy ...``. A description the error already says is
    not said twice (a lost task's line, ``tfdist: worker-0 lost: killed for memory: ...``,
    carries its reason)."""
    if error:
        return f"{task}: {error}" + (f" ({description})" if description and description not in error else "")
    return ": ".join(p for p in (task, description, decision(task, description, message)) if p)


def decision(task: str, description: str, message: str) -> str:
    """What the policy decided, without the ``worker-1 failed (exit code 1)`` it opens with
    (the policy's message is written to stand alone, in the log and the events; beside the
    task and its description it would say them a second time)."""
    said = f"{task} failed ({description})"
    if not description or not message.startswith(said):
        return message
    rest = message[len(said):].lstrip(";, ").strip()
    return rest.removeprefix("and ") or message


def _one_line(value: Any) -> str:
    return " ".join(str(value or "").split())


def cause_lines(cause: Mapping[str, Any]) -> tuple[str, str]:
    """A stored root cause (:class:`RootCause` as a dict, the job store's) as two lines: the
    :func:`headline`, and, when that leads with the task's own error, what tfdist saw and
    decided (``exit code 1, attempt 0: ... does not retry it``; else ""). A record from
    before ``error`` was kept has it found in its tail. Raw text: each view cleans it."""
    tail = cause.get("tail")
    lines = [str(x) for x in tail] if isinstance(tail, list) else []
    error = _one_line(cause.get("error")) or error_line(lines)
    description, message = _one_line(cause.get("description")), _one_line(cause.get("message"))
    first = headline(_one_line(cause.get("task")) or "?", error, description, message)
    if not error:
        return first, ""
    attempt = cause.get("attempt")
    said = ", ".join(p for p in (description, f"attempt {attempt}" if isinstance(attempt, int) else "") if p)
    decided = decision(_one_line(cause.get("task")), description, message)
    return first, ": ".join(p for p in (said, decided) if p)


@dataclass
class JobResult:
    name: str
    state: JobState  # succeeded | failed | interrupted | stopped (interrupted by `tfdist stop`)
    run_dir: str
    started_at: float
    ended_at: float
    restarts_used: int
    max_restarts: int
    tasks: tuple[TaskStatus, ...]
    root_cause: RootCause | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    #: Output lines that could not be written (a full disk), by file in the run directory.
    lines_lost: dict[str, int] = field(default_factory=dict)
    #: The goodput breakdown (tfdist.supervisor.goodput.Goodput.to_dict), None when training
    #: reported no step.
    goodput: dict[str, Any] | None = None

    @property
    def duration(self) -> float:
        return self.ended_at - self.started_at

    @property
    def exit_code(self) -> int:
        return self.state.exit_code

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(dataclasses.replace(self, tasks=()))
        # what summary.json keeps of each task (the job store has the whole status)
        data["tasks"] = [{"name": t.name, "state": t.state.value, "exit_code": t.exit_code,
                          "restarts": t.restarts, "address": t.address, "pid": t.pid}
                         for t in self.tasks]
        data["duration"] = round(self.duration, 3)
        return data
