"""What the dashboard's pages show, computed from records by pure functions (no I/O):
durations, the one-line root cause, the geometry of the attempts timeline, and the curves'
series with stragglers marked (:mod:`tfdist.supervisor.stragglers`). Tested without a
server or a browser."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfdist import contract
from tfdist.jobs import usage
from tfdist.jobs.records import AttemptRecord, JobRecord, TransitionRecord
from tfdist.states import JobState, TaskState, describe_exit
from tfdist.supervisor.output import without_startup
from tfdist.supervisor.result import cause_lines
from tfdist.supervisor.status import TaskStatus
from tfdist.supervisor.stragglers import RateWindow, stragglers
from tfdist.ui.text import clean

#: The timeline draws one row per task up to this many; above, only tasks that restarted or
#: did not succeed (the ones worth a look), with the count of the others.
TIMELINE_ROWS = 200


def duration(job: JobRecord, now: float | None = None) -> float | None:
    start = job.started_at or job.submitted_at
    if start is None:
        return None
    end = job.ended_at if job.ended_at else (now or time.time()) if job.state.active else None
    return None if end is None else max(0.0, end - start)


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def when_text(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def cause_line(cause: Mapping[str, Any] | None) -> str:
    """``worker-1: ValueError: bad batch (exit code 3)`` (:func:`~tfdist.supervisor.result.
    cause_lines`), cleaned for a page."""
    return clean(cause_lines(cause)[0][:500]) if cause else ""


def cause_detail(cause: Mapping[str, Any] | None) -> str:
    """The line under :func:`cause_line`: what tfdist saw and decided, when that one leads
    with the task's own error."""
    return clean(cause_lines(cause)[1][:500]) if cause else ""


def _tail(cause: Mapping[str, Any]) -> list[Any]:
    tail = cause.get("tail") or []
    return tail if isinstance(tail, list) else []


def cause_tail(cause: Mapping[str, Any] | None) -> list[str]:
    """The failed task's last lines, TensorFlow's start-up noise left out."""
    return [clean(x) for x in without_startup(str(x) for x in _tail(cause or {}))][-50:]


#: What a task reported (a progress value, the final metrics) is shown up to this many
#: characters: a report is the task's own JSON, any string up to a whole output line.
MAX_REPORTED = 200


def progress_text(progress: Mapping[str, Any] | None) -> str:
    """``epoch 2 step 300 loss 0.41`` from a task's last progress, as short text."""
    shown = [f"{k} {clean(str(progress[k]), MAX_REPORTED)}" for k in ("epoch", "step", "loss")
             if progress and progress.get(k) is not None]
    return " ".join(shown)


def metrics_text(metrics: Mapping[str, Any] | None) -> str:
    """``accuracy 0.9, loss 0.1`` from a job's final metrics, as short text."""
    return clean(", ".join(f"{k} {v}" for k, v in (metrics or {}).items()), 5 * MAX_REPORTED)


def restarts_text(job: JobRecord) -> str:
    return f"{job.restarts_used} of {job.max_restarts}" if job.max_restarts else str(job.restarts_used)


@dataclass(frozen=True)
class Bar:
    """One attempt on the timeline: ``x``/``w`` in 0..1000 of the job's span."""

    x: float
    w: float
    state: str
    title: str


@dataclass(frozen=True)
class TimelineRow:
    task: str
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class Timeline:
    rows: tuple[TimelineRow, ...]
    start: float
    end: float
    hidden: int  # tasks left out (above TIMELINE_ROWS, nothing to see)


def timeline(tasks: Sequence[TaskStatus], attempts: Iterable[AttemptRecord], start: float | None,
             end: float | None, now: float | None = None) -> Timeline:
    """Each task's attempts as bars on one time axis (start, exit and why in each title)."""
    now = now or time.time()
    by_task: dict[str, list[AttemptRecord]] = {}
    for a in attempts:
        by_task.setdefault(a.task, []).append(a)
    t0 = start or min((a.started_at for v in by_task.values() for a in v if a.started_at), default=now)
    t1 = end or now
    span = max(t1 - t0, 1e-6)
    shown = list(tasks)
    hidden = 0
    if len(shown) > TIMELINE_ROWS:
        worth = [t for t in shown if t.restarts or t.state not in (TaskState.SUCCEEDED, TaskState.RUNNING)]
        hidden = len(shown) - len(worth[:TIMELINE_ROWS])
        shown = worth[:TIMELINE_ROWS]
    rows = []
    for task in shown:
        bars = []
        for a in sorted(by_task.get(task.name, []), key=lambda x: x.attempt):
            if a.started_at is None:
                continue
            a_end = a.ended_at or (t1 if a.state in (TaskState.RUNNING, TaskState.STOPPING) else a.started_at)
            x = (a.started_at - t0) / span * 1000
            w = max((a_end - a.started_at) / span * 1000, 2.0)
            why = f", {a.reason}" if a.reason else ""
            ended = (f" to {when_text(a.ended_at)}, {describe_exit(a.exit_code)}" if a.ended_at
                     else ", running")
            title = (f"{task.name} attempt {a.attempt}: {a.state.value} from "
                     f"{when_text(a.started_at)}{ended}{why}")
            bars.append(Bar(round(max(x, 0.0), 2), round(min(w, 1000.0), 2), a.state.value, clean(title)))
        rows.append(TimelineRow(task.name, tuple(bars)))
    return Timeline(tuple(rows), t0, t1, hidden)


#: A job page lists the last this many events (its transitions).
EVENT_ROWS = 100


@dataclass(frozen=True)
class Event:
    """One line of a job page's events, like ``kubectl describe``'s."""

    time: float
    who: str  # "job", "worker-1 attempt 0"
    state: str
    what: str  # "exit code 3, hung: no output for 60s"


def events(transitions: Iterable[TransitionRecord]) -> list[Event]:
    """What happened to the job and its tasks, in order (a task's ``pending`` says nothing)."""
    out = []
    for t in transitions:
        if t.state is TaskState.PENDING:
            continue
        who = "job" if t.task is None else f"{t.task} attempt {t.attempt}"
        exited = describe_exit(t.exit_code) if t.exit_code is not None and t.task is not None else ""
        what = ", ".join(p for p in (exited, clean(t.reason or "", MAX_REPORTED)) if p)
        out.append(Event(t.time, who, t.state.value, what))
    return out


#: A job page lists every task up to this many; above, counts per role and state and the
#: tasks worth a look (``?tasks=all`` lists all: rendering 1,000 rows costs ~1 s here).
TASK_ROWS = 100


@dataclass(frozen=True)
class TaskTable:
    rows: tuple[TaskStatus, ...]
    total: int
    counts: tuple[tuple[str, str], ...]  # (role, "3 running, 1 failed")
    complete: bool


def task_table(tasks: Sequence[TaskStatus], show_all: bool = False) -> TaskTable:
    if show_all or len(tasks) <= TASK_ROWS:
        return TaskTable(tuple(tasks), len(tasks), (), True)
    by_role: dict[str, dict[str, int]] = {}
    for t in tasks:
        states = by_role.setdefault(t.role, {})
        states[t.state.value] = states.get(t.state.value, 0) + 1
    counts = tuple((role, ", ".join(f"{n} {s}" for s, n in sorted(st.items(), key=lambda x: -x[1])))
                   for role, st in by_role.items())
    worth = [t for t in tasks if t.restarts or t.state not in (TaskState.SUCCEEDED, TaskState.RUNNING)
             or near_memory_limit(t)]
    return TaskTable(tuple(worth[:TASK_ROWS]), len(tasks), counts, False)


def near_memory_limit(t: TaskStatus) -> bool:
    """A running task whose latest sample is near its memory limit (flagged on the page)."""
    return t.state is TaskState.RUNNING and usage.near_limit(t.usage)


def hosts(tasks: Sequence[TaskStatus]) -> list[dict[str, Any]]:
    """Resource use per host: the running tasks' latest CPU and RSS summed, by host."""
    found: dict[str, dict[str, Any]] = {}
    for t in tasks:
        if t.state is not TaskState.RUNNING or not t.usage:
            continue
        h = found.setdefault(t.host or "-", {"host": t.host or "-", "tasks": 0, "cpu": 0.0, "rss": 0})
        h["tasks"] += 1
        cpu, rss = _number(t.usage.get("cpu")), _number(t.usage.get("rss"))
        h["cpu"] = round(h["cpu"] + (cpu or 0.0), 3)
        h["rss"] += int(rss or 0)
    return sorted(found.values(), key=lambda h: str(h["host"]))


#: A job's curves are drawn from at most this many progress reports (a sample of each
#: task's, its latest always in: :func:`tfdist.jobs.queries.progress_sample`), whatever the
#: number of reports: a job that reports once a second has 86,400 a day per task.
CURVE_POINTS = 20_000

#: The values a curve is drawn of, read from each progress report besides its ``metrics``
#: (each of those, ``val_*`` included, is a series too).
SERIES = ("loss", "examples_per_sec", "steps_per_sec")
#: A task's metric names become series up to this many (a report is the task's own JSON).
MAX_SERIES = 24
_SERIES_NAME = re.compile(r"[A-Za-z0-9_.\-/]{1,64}")
#: A restart mark names up to this many of the tasks that restarted.
RESTART_TASKS = 5


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _values(r: Mapping[str, Any]) -> Iterable[tuple[str, float]]:
    for key in SERIES:
        v = _number(r.get(key))
        if v is not None:
            yield key, v
    given = r.get("metrics")
    for key, value in (given.items() if isinstance(given, dict) else ()):
        v = _number(value)
        if v is not None and key not in SERIES and isinstance(key, str) and _SERIES_NAME.fullmatch(key):
            yield key, v


def curves(progress: Iterable[Mapping[str, Any]], start: float | None) -> dict[str, Any]:
    """Per task: the step and elapsed seconds of each report, and ``series``: for each value
    reported (loss, each metric, ``val_*`` ones too, the rates), the step, elapsed seconds
    and value of only the reports that carry it, so a line joins them (goodput marks and
    step reports without the epoch's metrics leave no gap). ``restarts``: per attempt, when
    the first task began it. Stragglers by their latest step rate."""
    rows = list(progress)
    t0 = start if start is not None else min((r["time"] for r in rows), default=0.0)
    tasks: dict[str, dict[str, Any]] = {}
    attempts: dict[str, int] = {}
    restarts: dict[int, dict[str, Any]] = {}
    for r in rows:
        name = str(r.get("task"))
        elapsed = round(float(r["time"]) - t0, 3)
        step = _number(r.get("step"))
        attempt = r.get("attempt")
        if isinstance(attempt, int) and attempt > attempts.setdefault(name, attempt):
            attempts[name] = attempt
            mark = restarts.setdefault(attempt, {"attempt": attempt, "tasks": [], "step": step,
                                                 "elapsed": elapsed, "more": 0})
            if len(mark["tasks"]) < RESTART_TASKS:
                mark["tasks"].append(name)
            else:
                mark["more"] += 1
            if mark["step"] is None or (step is not None and step < mark["step"]):
                mark["step"] = step
            mark["elapsed"] = min(mark["elapsed"], elapsed)
        if r.get("final") or contract.MARK in r:
            continue
        t = tasks.setdefault(name, {"step": [], "elapsed": [], "series": {}})
        t["step"].append(step)
        t["elapsed"].append(elapsed)
        for key, value in _values(r):
            s = t["series"].get(key)
            if s is None:
                if len(t["series"]) >= MAX_SERIES:
                    continue
                s = t["series"][key] = {"step": [], "elapsed": [], "y": []}
            s["step"].append(step)
            s["elapsed"].append(elapsed)
            s["y"].append(value)
    window = RateWindow()
    for r in rows:
        window.add(str(r.get("task")), float(r["time"]), r)
    training = {n for n in tasks if n.startswith(("chief-", "worker-"))}
    return {"tasks": tasks, "stragglers": sorted(stragglers(window.judged(training))),
            "restarts": [restarts[a] for a in sorted(restarts)]}


def state_class(state: JobState | TaskState | str) -> str:
    """The CSS class of a state (its value; the stylesheet colours them)."""
    return f"st-{getattr(state, 'value', state)}"


# -- the jobs list's columns, labels, the time left, compared specs -----------------------


def restarts_cell(job: JobRecord) -> str:
    """``used/allowed`` on every row of the jobs list (``0/0`` for a job that may not restart),
    so the column reads the same down the page."""
    return f"{job.restarts_used}/{job.max_restarts or 0}"


def epoch_text(progress: Mapping[str, Any] | None) -> str:
    """``39/400`` (epochs done of all), ``39`` when the total is unknown, else ``-``."""
    epoch = _number((progress or {}).get("epoch"))
    if epoch is None:
        return "-"
    epochs = _number((progress or {}).get("epochs"))
    return f"{epoch:.0f}/{epochs:.0f}" if epochs else f"{epoch:.0f}"


def progress_cell(job: JobRecord) -> str:
    """The jobs list's progress: epochs (``39/400``) and the step of the lead task."""
    p = job.lead_progress or {}
    parts = []
    if _number(p.get("epoch")) is not None:
        parts.append("epoch " + epoch_text(p))
    if _number(p.get("step")) is not None:
        parts.append(f"step {_number(p.get('step')):.0f}")
    return " ".join(parts) or "-"


def goodput_cell(job: JobRecord) -> str:
    """The share of the job's time in steps kept (recorded at its end), or ``-``."""
    value = _number((job.goodput or {}).get("goodput"))
    return f"{100 * value:.1f}%" if value is not None else "-"


def accuracy_cell(job: JobRecord) -> str:
    """The job's accuracy: its final metrics', else the lead task's last report's; ``-``."""
    lead = (job.lead_progress or {}).get("metrics")
    for source in (job.metrics or {}, lead if isinstance(lead, Mapping) else {}):
        for key in ("accuracy", "acc", "sparse_categorical_accuracy", "categorical_accuracy"):
            value = _number(source.get(key))
            if value is not None:
                return f"{value:.4f}"
    return "-"


def epochs_left(reports: Sequence[Mapping[str, Any]], started: float | None, now: float,
                running: bool) -> tuple[str, float | None]:
    """``("39/400", seconds left)`` from the first and last reports that name an epoch
    (:func:`tfdist.jobs.queries.epoch_reports`): the pace between them (or since the start,
    with one report) times the epochs to go, less the time since the last report. None when
    the job is not running or there is no pace to go by."""
    if not reports:
        return "-", None
    last = reports[-1]
    text = epoch_text(last)
    done, total, at = _number(last.get("epoch")), _number(last.get("epochs")), _number(last.get("time"))
    if not running or done is None or not total or at is None:
        return text, None
    first = reports[0]
    e0, t0 = _number(first.get("epoch")), _number(first.get("time"))
    if e0 is not None and t0 is not None and done > e0 and at > t0:
        per_epoch = (at - t0) / (done - e0)
    elif started is not None and done > 0 and at > started:
        per_epoch = (at - started) / done
    else:
        return text, None
    return text, max(0.0, (total - done) * per_epoch - max(0.0, now - at))


def parse_label_filter(text: str) -> tuple[tuple[str, str], ...]:
    """``team=vision exp=a1`` (spaces or commas between) as (key, value) pairs; ValueError
    names the first one that is no label."""
    from tfdist.jobspec import labels

    pairs = [labels.parse(part, "label") for part in re.split(r"[\s,]+", text) if part]
    return tuple(dict(pairs).items())


MAX_COMPARED = 8
#: A spec compared is read up to this many characters (job.yaml is small; a huge one is cut).
DIFF_LINES = 2000


def spec_diffs(specs: Sequence[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """Each spec after the first as a unified diff against the first: ``(title, lines)``;
    an identical spec is ``(title, [])``."""
    import difflib

    if not specs:
        return []
    base_id, base = specs[0]
    out = []
    for job_id, text in specs[1:]:
        lines = list(difflib.unified_diff(base.splitlines(), text.splitlines(), fromfile=base_id,
                                          tofile=job_id, lineterm="", n=2))
        out.append((f"{base_id} → {job_id}", [clean(line, 500) for line in lines[:DIFF_LINES]]))
    return out


@dataclass(frozen=True)
class DataView:
    """The job page's data section: each input (name, mode, files, size), each output (name,
    URI, the task it is kept from) and per task what it got and its staging, all as safe
    text (tfdist.data.shown); ``more``: tasks that got files and are not listed."""

    inputs: tuple[tuple[str, str, str, str], ...]
    outputs: tuple[tuple[str, str, str], ...]
    rows: tuple[tuple[str, tuple[tuple[str, str], ...], str], ...]
    more: int
    #: What staging cost the job (goodput's ``staging`` cause), or empty.
    cost: str = ""


def data_view(shown: Mapping[str, Any] | None, tasks: Sequence[TaskStatus],
              goodput: Mapping[str, Any] | None = None) -> DataView | None:
    """The data section from a job's recorded data (tfdist.jobs.inputs.job_data) and its
    tasks' last progress (where the supervisor keeps each task's last staging); None for a
    job without data."""
    from tfdist.data.shown import goodput_text, share_text, staging_text
    from tfdist.safe_text import one_line
    from tfdist.states import bytes_text

    if not shown:
        return None
    inputs = tuple(
        (clean(one_line(name), MAX_REPORTED), clean(one_line(str(info.get("mode"))), MAX_REPORTED),
         str(info["files"]) if isinstance(info.get("files"), int) else "-",
         bytes_text(float(info["bytes"])) if isinstance(info.get("bytes"), int) else "-")
        for name, info in shown.get("inputs", {}).items())
    writer = clean(one_line(str(shown.get("writer") or "-")), MAX_REPORTED)
    outputs = tuple((clean(one_line(name), MAX_REPORTED), clean(one_line(str(uri)), MAX_REPORTED), writer)
                    for name, uri in shown.get("outputs", {}).items())
    staged = {t.name: t.progress.get("staging") for t in tasks}
    got = shown.get("tasks", {})
    rows = tuple((clean(one_line(task), MAX_REPORTED),
                  tuple((clean(one_line(name), MAX_REPORTED), share_text(share))
                        for name, share in inputs_of.items()),
                  staging_text(staged.get(task)))
                 for task, inputs_of in got.items())
    total = shown.get("tasks_total")
    more = total - len(rows) if isinstance(total, int) and total > len(rows) else 0
    return DataView(inputs, outputs, rows, more, goodput_text(goodput))
