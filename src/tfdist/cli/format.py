"""How the views print things: times, durations, exits, progress, the restart budget."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfdist.states import JobState, budget_text, bytes_text

if TYPE_CHECKING:
    from tfdist.jobs.records import JobRecord


def when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def duration(job: JobRecord) -> str:
    start = job.started_at or job.submitted_at
    if not start:
        return "-"
    end = job.ended_at or (time.time() if job.state.active else None)
    if end is None:
        return "-"
    s = max(0, int(end - start))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def progress_text(p: Mapping[str, Any]) -> str:
    """``epoch 2/3 step 40 loss 0.3124 acc 0.91 1200 ex/s`` from a progress report."""
    if not p:
        return "-"
    parts = []
    if p.get("epoch") is not None:
        parts.append(f"epoch {p['epoch']}" + (f"/{p['epochs']}" if p.get("epochs") else ""))
    if p.get("step") is not None:
        parts.append(f"step {p['step']}")
    if isinstance(p.get("loss"), int | float):
        parts.append(f"loss {p['loss']:.4f}")
    for k, v in (p.get("metrics") or {}).items():
        if isinstance(v, int | float) and not k.startswith("val_") and len(parts) < 6:
            parts.append(f"{k} {v:.4f}")
    if isinstance(p.get("examples_per_sec"), int | float):
        parts.append(f"{p['examples_per_sec']:.0f} ex/s")
    if p.get("final"):
        parts.append("final")
    return " ".join(parts) or "-"


def console() -> Any:
    from rich.console import Console

    # Piped output is read by scripts and people with wide windows: no wrapping at 80.
    width = None if sys.stdout.isatty() else 250
    return Console(highlight=False, soft_wrap=True, width=width)


STYLE = {JobState.SUCCEEDED: "green", JobState.RUNNING: "cyan", JobState.FAILED: "red",
         JobState.LOST: "magenta", JobState.STOPPED: "yellow", JobState.INTERRUPTED: "yellow",
         JobState.SUBMITTED: "blue"}


def restarts_text(job: JobRecord, *, short: bool = False) -> str:
    """The restart budget, ``1 of 3 used, 2 left`` (``short``: ``1/3``); the budget is
    recorded when the job starts, so a job not started yet shows only what it used."""
    used, budget = job.restarts_used or 0, job.max_restarts
    if budget is None:
        return str(used) if short else f"{used} used"
    return f"{used}/{budget}" if short else budget_text(used, budget)



def data_lines(shown: Mapping[str, Any] | None, staging: Mapping[str, Mapping[str, Any]],
               limit: int = 20, goodput: Mapping[str, Any] | None = None) -> list[str]:
    """What ``status`` and the summary say of a job's data: each input and output, then each
    task's files (count, bytes, the first few names) and how long its last staging took.
    ``shown`` is the plan's bounded view (tfdist.data.plan.summary: from the job store, else
    the run's ``data.json``), ``staging`` each task's last ``stage`` report (seconds, files,
    copied, bytes); at most ``limit`` task lines; with the job's ``goodput``, what staging
    cost it (its own cause there). Names are escaped (tfdist.data.shown)."""
    from tfdist.data.shown import goodput_text, task_line
    from tfdist.safe_text import one_line

    if not shown:
        return []
    lines = []
    for name, info in (shown.get("inputs") or {}).items():
        size = info.get("bytes")
        size_shown = bytes_text(float(size)) if isinstance(size, int) else "-"
        files = info.get("files")
        lines.append(one_line(f"input {name}: {files} file{'' if files == 1 else 's'}, {size_shown}, "
                              f"{info.get('mode')}"))
    for name, uri in (shown.get("outputs") or {}).items():
        lines.append(one_line(f"output {name}: {uri} (kept from {shown.get('writer')})"))
    if cost := goodput_text(goodput):
        lines.append(cost)
    tasks = list((shown.get("tasks") or {}).items())
    lines.extend(f"  {task_line(task, inputs, staging.get(task))}" for task, inputs in tasks[:limit])
    given = shown.get("tasks_total")
    total = given if isinstance(given, int) else len(tasks)
    if total > min(limit, len(tasks)):
        lines.append(f"  ... {total - min(limit, len(tasks))} more tasks (data.json in the run directory)")
    return lines


def staging_of(reports: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each task's last ``stage`` report among progress ``reports`` (the job store's rows)."""
    found: dict[str, dict[str, Any]] = {}
    for row in reports:
        if row.get("mark") == "stage":
            found[str(row.get("task"))] = dict(row)
    return found
