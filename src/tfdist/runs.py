"""The run directory: where one run of a job keeps everything, and how tfdist knows its own.

``<runs root>/<job>-<YYYYmmdd-HHMMSS>[-N]/`` holds ``job.yaml`` (the spec as run),
``logs/<task>.log``, ``events.jsonl`` (every task transition), ``progress.jsonl``,
``summary.json`` (written when the run ends), ``supervisor.log`` for a detached job, and
whatever the tasks write under it (``model/``, ``checkpoints/``, ``tensorboard/``).

Every run directory tfdist creates carries :data:`MARKER`. Only such a directory is ever
deleted by ``tfdist clean``, and ``--run-dir`` refuses a non-empty directory without it, so
tfdist never removes a directory it did not make.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tfdist.errors import BackendError, SpecError

#: Where run directories go unless --runs-dir (or BackendOptions.runs_root) says otherwise.
DEFAULT_RUNS = "tfdist-runs"
JOB_FILE = "job.yaml"
SUMMARY = "summary.json"
EVENTS = "events.jsonl"
PROGRESS = "progress.jsonl"
LOGS = "logs"
SUPERVISOR_LOG = "supervisor.log"
#: The file that says "tfdist made this directory" (its content: who and when).
MARKER = ".tfdist-run"


def _mark(path: Path) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    (path / MARKER).write_text(f"tfdist run directory, created {stamp} by pid {os.getpid()}\n")


def is_run_dir(path: Path) -> bool:
    """A real directory (not a symlink) that tfdist created."""
    return path.is_dir() and not path.is_symlink() and (path / MARKER).is_file()


def check_runs_root(root: str | Path) -> Path:
    """The runs root, checked but not created: a file in its place, or a place where it
    cannot be made (no such writable parent), is bad input (exit 2) before anything starts."""
    path = Path(root).resolve()
    if path.exists() and not path.is_dir():
        raise SpecError(f"--runs-dir: {root} is not a directory; give a directory for run directories")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SpecError(f"--runs-dir: cannot create {root}: {existing} is not a directory; "
                        "give a writable directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError(f"--runs-dir: cannot write in {existing}; give a writable directory")
    return path


def runs_root(root: str | Path) -> Path:
    """The runs root (see :func:`check_runs_root`), created if needed."""
    path = check_runs_root(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError(
            f"--runs-dir: cannot create {root} ({err.strerror}); give a writable directory"
        ) from None
    return path


def new_run_dir(name: str, root: str | Path = DEFAULT_RUNS) -> Path:
    """``<root>/<name>-<YYYYmmdd-HHMMSS>[-N]``: unique, sortable, readable, marked as ours."""
    base = runs_root(root) / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, n = base, 1
    while True:
        try:
            candidate.mkdir()
        except FileExistsError:
            n += 1
            candidate = base.with_name(f"{base.name}-{n}")
            continue
        except OSError as err:
            raise BackendError(f"cannot create a run directory in {root} ({err.strerror})") from None
        try:
            _mark(candidate)
        except OSError as err:
            candidate.rmdir()
            raise BackendError(f"cannot write in the run directory {candidate} ({err.strerror})") from None
        return candidate


def use_run_dir(path: str | Path) -> Path:
    """A run directory the caller named (``--run-dir``): one tfdist made (a submitted job's),
    or a new or empty one, which is marked as ours now. Anything else is refused, so that a
    later ``tfdist clean`` can never delete a directory the user had before."""
    path = Path(path)
    if path.is_symlink():
        raise SpecError(f"--run-dir: {path} is a symbolic link; give a new directory")
    if path.exists():
        if not path.is_dir():
            raise SpecError(f"--run-dir: {path} is not a directory; give a new directory")
        if is_run_dir(path):
            return path.resolve()
        if any(path.iterdir()):
            raise SpecError(
                f"--run-dir: {path} is not empty and was not made by tfdist; give a new or empty directory"
            )
    else:
        try:
            path.mkdir(parents=True)
        except OSError as err:
            raise SpecError(f"--run-dir: cannot create {path} ({err.strerror})") from None
    _mark(path)
    return path.resolve()
