"""Acting on recorded jobs: stop, describe, clean, and reading their logs."""

from __future__ import annotations

import contextlib
import math
import shutil
import signal
import time
from pathlib import Path
from typing import IO, Any

from tfdist import runs
from tfdist.errors import SpecError
from tfdist.jobs.liveness import supervisor_alive
from tfdist.jobs.store import ACTIVE, FINAL, Store


def _alive(job: dict[str, Any]) -> bool:
    return supervisor_alive(job.get("supervisor_pid"), job.get("supervisor_start"))


def stop(store: Store, ref: str, grace: float = 30.0, *, echo: IO[str] | None = None) -> dict[str, Any]:
    """SIGTERM the job's supervisor (it stops its tasks gracefully), SIGKILL after ``grace``
    seconds. Returns the job as recorded afterwards."""
    import psutil

    job = store.job(ref)
    if job["state"] in FINAL or job["state"] == "lost":
        return job
    pid = job["supervisor_pid"]
    store.request_stop(job["id"])
    if not pid or not _alive(job):
        store.mark(job["id"], "stopped", "stopped before its supervisor started")
        return store.job(job["id"])
    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
    except psutil.Error:
        return store.job(job["id"])
    forced = False
    try:
        proc.wait(timeout=grace)
    except psutil.TimeoutExpired:
        if echo:
            echo.write(f"tfdist: {job['id']} did not stop within {grace:g}s; killing it\n")
        with contextlib.suppress(psutil.Error):
            proc.kill()  # the supervisor's guardian then kills every task's process group
            proc.wait(timeout=10)
        forced = True
    except psutil.Error:
        pass
    # A supervisor that handled SIGTERM recorded its own end before exiting; one killed
    # (or that died before it could handle the signal) did not, so record it here.
    after = store.job(job["id"])
    if after["recorded_state"] not in FINAL:
        store.mark(job["id"], "stopped", "killed by tfdist stop" if forced else "stopped")
        after = store.job(job["id"])
    return after


def describe(store: Store, ref: str, *, transitions: bool = False) -> dict[str, Any]:
    """A job with its tasks (and, with ``transitions``, every state transition and every
    task attempt: the restart history); tasks of a lost job that were not over are shown
    as ``lost`` too, since nobody watches them any more."""
    job = store.job(ref)
    job["tasks"] = store.tasks(job["id"])
    if job["state"] == "lost":
        for task in job["tasks"]:
            if task["state"] not in ("succeeded", "failed", "stopped"):
                task["state"] = "lost"
    if transitions:
        job["transitions"] = store.transitions(job["id"])
        job["attempts"] = store.attempts(job["id"])
    start = job["started_at"]
    job["duration"] = round((job["ended_at"] or time.time()) - start, 3) if start else None
    return job


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


def clean(store: Store, older_than: float, *, dry_run: bool = False) -> list[dict[str, Any]]:
    """Remove ended (or lost) jobs that ended more than ``older_than`` seconds ago: their
    records, and their run directories when tfdist made them (:func:`tfdist.runs.is_run_dir`:
    never a directory without tfdist's marker, never through a symbolic link). Each job
    returned says in ``removed_dir`` which directory was deleted (None: only the record)."""
    now = time.time()
    removed = []
    for job in store.jobs():
        if job["state"] not in FINAL and job["state"] != "lost":
            continue
        ended = job["ended_at"] or job["started_at"] or job["submitted_at"] or now
        if now - ended < older_than:
            continue
        run_dir = Path(job["run_dir"]) if job["run_dir"] else None
        ours = run_dir is not None and runs.is_run_dir(run_dir)
        job["removed_dir"] = str(run_dir) if ours else None
        removed.append(job)
        if dry_run:
            continue
        if ours and run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
        store.delete_job(job["id"])
    return removed


def log_files(job: dict[str, Any], task: str | None, tasks: list[str]) -> list[tuple[str, Path]]:
    """(label, path) of the logs to show: one task, or every task in order."""
    run_dir = Path(job["run_dir"])
    if task == "supervisor":
        return [("supervisor", run_dir / runs.SUPERVISOR_LOG)]
    if task is not None:
        if tasks and task not in tasks:
            raise SpecError(f"job {job['id']} has no task '{task}'; its tasks are {', '.join(tasks)}")
        return [(task, run_dir / "logs" / f"{task}.log")]
    names = tasks or sorted(p.stem for p in (run_dir / "logs").glob("*.log"))
    return [(n, run_dir / "logs" / f"{n}.log") for n in names]


def tail_lines(path: Path, n: int | None) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
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
    while True:
        ended = store.job(job_id)["state"] not in ACTIVE
        for label, path in files:
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    handle.seek(offsets[path])
                    chunk = handle.read()
                    offsets[path] = handle.tell()
            except FileNotFoundError:
                continue
            text = partial.pop(path, "") + chunk
            *lines, rest = text.split("\n")
            if rest:
                partial[path] = rest
            for line in lines:
                out.write(f"[{label}] {line}\n" if prefix else line + "\n")
        out.flush()
        if ended:
            return
        time.sleep(poll)
