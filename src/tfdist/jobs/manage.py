"""Acting on recorded jobs: stop, describe, clean, and reading their logs."""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import math
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tfdist import durations, runs
from tfdist.errors import SpecError, TfdistError
from tfdist.jobs.fallback import effective_tasks
from tfdist.jobs.records import JobRecord, JobStatus, TransitionRecord
from tfdist.jobs.store import Store
from tfdist.pids import same_process
from tfdist.states import JobState
from tfdist.supervisor import goodput
from tfdist.supervisor.status import TaskStatus

#: The longest ``stop --grace`` accepted (a day): beyond it, or not a number, is a typo.
MAX_GRACE = 86400.0


def check_grace(grace: float) -> float:
    """``--grace``: a finite number of seconds from 0 to a day, checked before any signal."""
    value = durations.seconds(grace, MAX_GRACE)
    if value is None:
        raise SpecError(f"--grace: {grace!r} is not a number of seconds from 0 to {MAX_GRACE:g}; "
                        "give e.g. --grace 30")
    return value


def _alive(job: JobRecord) -> bool:
    return same_process(job.supervisor_pid, job.supervisor_start)


def stop(store: Store, ref: str, grace: float = 30.0, *, echo: IO[str] | None = None) -> JobRecord:
    """SIGTERM the job's supervisor (it stops its tasks gracefully), SIGKILL after ``grace``
    seconds. Returns the job as recorded afterwards.

    Idempotent: a second ``stop`` while one is in progress sends the same SIGTERM, which the
    supervisor ignores while it is already stopping (see :mod:`tfdist.supervisor.interrupts`),
    so the tasks keep their whole grace period; each ``stop`` escalates only after its own
    ``grace``."""
    import psutil

    grace = check_grace(grace)
    job = store.job(ref)
    if not job.state.active:
        return job
    pid = job.supervisor_pid
    earlier = store.request_stop(job.id)
    if earlier is not None and echo:
        echo.write(f"tfdist: {job.id} is already being stopped (asked at "
                   f"{time.strftime('%H:%M:%S', time.localtime(earlier))}); waiting for it\n")
    if not pid or not _alive(job):
        store.mark(job.id, JobState.STOPPED, "stopped before its supervisor started")
        return store.job(job.id)
    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
    except psutil.Error:
        return store.job(job.id)
    forced = False
    try:
        proc.wait(timeout=grace)
    except psutil.TimeoutExpired:
        if echo:
            echo.write(f"tfdist: {job.id} did not stop within {grace:g}s; killing it\n")
        with contextlib.suppress(psutil.Error):
            proc.kill()  # the supervisor's guardian then kills every task's process group
            proc.wait(timeout=10)
        forced = True
    except psutil.Error:
        pass
    # A supervisor that handled SIGTERM recorded its own end before exiting (or wrote its
    # summary.json, which stands in for a record the store missed); one killed (or that died
    # before it could handle the signal) did neither, so record it here.
    after = store.job(job.id)
    if after.state.active or after.state is JobState.LOST:
        store.mark(job.id, JobState.STOPPED, "killed by tfdist stop" if forced else "stopped")
        after = store.job(job.id)
    return after


def describe(store: Store, ref: str, *, transitions: bool = False) -> JobStatus:
    """A job with its tasks (and, with ``transitions``, every state transition and every
    task attempt: the restart history). Where the store missed records, the run directory's
    summary and events stand in (:mod:`tfdist.jobs.fallback`); tasks of a lost job that were
    not over are shown as ``lost``, since nobody watches them any more."""
    job = store.job(ref)
    tasks = tuple(effective_tasks(job, store.tasks(job.id)))
    start = job.started_at
    duration = round((job.ended_at or time.time()) - start, 3) if start else None
    if not transitions:
        return JobStatus(job, tasks, duration)
    history = tuple(store.transitions(job.id))
    if job.goodput is None and job.state is JobState.RUNNING and start:  # none stored yet
        job = dataclasses.replace(job, goodput=goodput_so_far(store, job.id, tasks, history, start))
    return JobStatus(job, tasks, duration, history, tuple(store.attempts(job.id)))


def goodput_so_far(store: Store, job_id: str, tasks: tuple[TaskStatus, ...],
                   history: tuple[TransitionRecord, ...], start: float) -> dict[str, Any] | None:
    """The goodput of a running job up to now, from its recorded transitions and reports."""
    reference = "chief-0" if any(t.role == "chief" for t in tasks) else "worker-0"
    rows = [t.to_dict() for t in history if t.task is not None]
    reports = [r for r in store.progress(job_id) if r.get("task") == reference]
    found = goodput.breakdown(goodput.from_rows(rows, reports), reference=reference, start=start,
                              end=time.time(), ended=False)
    return goodput.so_far(found) if found is not None else None


def parse_age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``45s`` or plain seconds -> seconds (finite, not negative)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower()
    try:
        seconds = float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise SpecError(f"--older-than: cannot read '{text}'; give an age such as 7d, 12h, 30m or 0")
    return seconds


@dataclass(frozen=True)
class Cleaned:
    """One job ``clean`` removed (or would): ``removed_dir`` is the run directory deleted
    with it (None: only the record; the directory is not tfdist's); ``error`` says why a
    directory could not be deleted whole."""

    job: JobRecord
    removed_dir: str | None
    error: str | None = None


def _remove_tree(path: Path) -> str | None:
    """Delete a run directory (never following symbolic links inside it); the first error."""
    errors: list[str] = []

    def failed(func: object, where: str, exc: tuple[type, BaseException, object]) -> None:
        errors.append(f"{where}: {getattr(exc[1], 'strerror', None) or exc[1]}")

    if not runs.is_run_dir(path):  # checked again at the last moment
        return f"{path} is no longer a tfdist run directory; kept"
    shutil.rmtree(path, onerror=failed)
    return errors[0] if errors else None


def clean(store: Store, older_than: float, *, dry_run: bool = False) -> list[Cleaned]:
    """Remove ended (or lost) jobs that ended more than ``older_than`` seconds ago: their
    records, and their run directories when tfdist made them (:func:`tfdist.runs.is_run_dir`:
    never a directory without tfdist's marker, never through a symbolic link)."""
    now = time.time()
    removed = []
    for job in store.jobs():
        if job.state.active:
            continue
        ended = job.ended_at or job.started_at or job.submitted_at or now
        if now - ended < older_than:
            continue
        run_dir = Path(job.run_dir) if job.run_dir else None
        ours = run_dir is not None and runs.is_run_dir(run_dir)
        item = Cleaned(job, str(run_dir) if ours else None)
        if not dry_run:
            if ours and run_dir is not None:
                item = dataclasses.replace(item, error=_remove_tree(run_dir))
            store.delete_job(job.id)
        removed.append(item)
    return removed


def task_names(job: JobRecord, recorded: list[str]) -> list[str]:
    """The job's own task names: from the job file in its run directory (known before any
    task is recorded), else the recorded tasks."""
    from tfdist.cluster import task_ids
    from tfdist.jobspec import load

    if job.run_dir:
        with contextlib.suppress(TfdistError, OSError, ValueError):
            return [t.name for t in task_ids(load.from_file(Path(job.run_dir) / runs.JOB_FILE))]
    return recorded


def log_files(job: JobRecord, task: str | None, recorded: list[str]) -> list[tuple[str, Path]]:
    """(label, path) of the logs to show: one task, or every task in order. Only the job's
    own task names (and ``supervisor``) are accepted; a path is built only from those. A run
    directory that is there but is not one tfdist made (replaced by a symbolic link, or
    without its marker) is refused, as the dashboard refuses it: its files are read through
    :func:`tfdist.runs.open_in_run_dir` (:func:`tail_lines`)."""
    run_dir = Path(job.run_dir or ".")
    if job.run_dir and os.path.lexists(run_dir) and not runs.is_run_dir(run_dir):
        raise TfdistError(f"job {job.id}: its run directory {run_dir} is not one tfdist made (a "
                          "symbolic link, or a directory without .tfdist-run); nothing is read "
                          "from it")
    if task == "supervisor":
        return [("supervisor", run_dir / runs.SUPERVISOR_LOG)]
    names = task_names(job, recorded)
    if task is not None:
        if task not in names:
            known = f"its tasks are {', '.join(names)}" if names else "its task list is unknown"
            raise SpecError(f"job {job.id} has no task {task!r}; {known} (or 'supervisor')")
        name = names[names.index(task)]
        return [(name, run_dir / runs.LOGS / f"{name}.log")]
    return [(n, run_dir / runs.LOGS / f"{n}.log") for n in names]


def open_log(path: Path) -> int | None:
    """A descriptor of a log that :func:`log_files` named (``RUN_DIR/logs/TASK.log`` or
    ``RUN_DIR/supervisor.log``), opened as the dashboard opens it (no symbolic link on the
    way, a regular file in a run directory tfdist made); None while it does not exist yet."""
    in_logs = path.parent.name == runs.LOGS
    root = path.parent.parent if in_logs else path.parent
    parts = (runs.LOGS, path.name) if in_logs else (path.name,)
    try:
        return runs.open_in_run_dir(root, *parts)
    except runs.OutsideRunDir as err:
        if err.missing:
            return None
        raise TfdistError(f"not reading {path}: {err} (a log is read only as a regular file "
                          "in a run directory tfdist made, through no symbolic link)") from None


def _read_from(fd: int, offset: int = 0) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def tail_lines(path: Path, n: int | None) -> list[str]:
    fd = open_log(path)
    if fd is None:
        return []
    try:
        text = _read_from(fd).decode("utf-8", errors="replace")
    finally:
        os.close(fd)
    lines = text.splitlines()
    return lines if n is None else lines[-n:] if n > 0 else []


def follow(store: Store, job_id: str, files: list[tuple[str, Path]], out: IO[str],
           prefix: bool, tail: int | None, poll: float = 0.25) -> None:
    """Print the logs, then new lines as they come, until the job ends (or is lost)."""
    offsets: dict[Path, int] = {}
    for label, path in files:
        lines = tail_lines(path, tail)
        for line in lines:
            out.write(f"[{label}] {line}\n" if prefix else line + "\n")
        offsets[path] = path.stat().st_size if path.exists() else 0
    out.flush()
    partial: dict[Path, str] = {}
    decoders = {path: codecs.getincrementaldecoder("utf-8")("replace") for _, path in files}
    while True:
        ended = not store.job(job_id).state.active
        for label, path in files:
            fd = open_log(path)
            if fd is None:
                continue
            try:
                data = _read_from(fd, offsets[path])
            finally:
                os.close(fd)
            offsets[path] += len(data)
            text = partial.pop(path, "") + decoders[path].decode(data)
            *lines, rest = text.split("\n")
            if rest:
                partial[path] = rest
            for line in lines:
                out.write(f"[{label}] {line}\n" if prefix else line + "\n")
        out.flush()
        if ended:
            return
        time.sleep(poll)
