"""The run directory: where one run of a job keeps everything, and how tfdist knows its own.

``<runs root>/<job>-<YYYYmmdd-HHMMSS>[-N]/`` holds ``job.yaml`` (the spec as run),
``logs/<task>.log``, ``events.jsonl`` (every task transition), ``progress.jsonl``,
``summary.json`` (written when the run ends), ``supervisor.log`` for a detached job, and
whatever the tasks write under it (``model/``, ``checkpoints/``, ``tensorboard/``).

Every run directory tfdist creates carries :data:`MARKER`. Only such a directory is ever
deleted by ``tfdist clean``, and ``--run-dir`` refuses a non-empty directory without it, so
tfdist never removes a directory it did not make.

A run directory is its user's only (mode 0700, whatever the umask): its logs hold what the
tasks print, secrets included, and on a shared machine other users must not read them.
"""

from __future__ import annotations

import errno
import os
import stat
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
#: The job's data plan (tfdist.data.plan): which files each task got; ``data/<task>/`` holds
#: a task's staged inputs and output directories on the local backend.
DATA = "data.json"
#: TensorBoard's URL while ``run --tensorboard`` serves it (one line; gone once it stops): how
#: a backend learns it without knowing the observer (YARN's job application shows it).
TENSORBOARD_URL = "tensorboard.url"
#: The file that says "tfdist made this directory" (its content: who and when).
MARKER = ".tfdist-run"
#: A run directory's mode: its user's only (see the module doc).
PRIVATE = 0o700


def _mark(path: Path) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    (path / MARKER).write_text(f"tfdist run directory, created {stamp} by pid {os.getpid()}\n")


def is_run_dir(path: Path) -> bool:
    """A real directory (not a symlink) that tfdist created."""
    return path.is_dir() and not path.is_symlink() and (path / MARKER).is_file()


class OutsideRunDir(Exception):
    """The file is not a regular file inside a tfdist run directory (or does not exist:
    ``missing``)."""

    def __init__(self, message: str, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def open_in_run_dir(run_dir: str | Path, *parts: str) -> int:
    """A read-only descriptor of ``run_dir/parts...``; :class:`OutsideRunDir` otherwise."""
    root = Path(run_dir)
    if not is_run_dir(root):
        raise OutsideRunDir(f"{root} is not a tfdist run directory")
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\x00" in part:
            raise OutsideRunDir(f"not a file name: {part!r}")
    # O_NONBLOCK: opening a named pipe the task put there returns at once (to be refused as
    # not a regular file) instead of waiting for a writer; reads of a regular file ignore it
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(root, flags | os.O_DIRECTORY)
    except OSError as err:
        raise OutsideRunDir(f"{root}: {err.strerror}") from None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                nfd = os.open(part, flags | (0 if last else os.O_DIRECTORY), dir_fd=fd)
            except OSError as err:  # ELOOP: a symbolic link; ENOTDIR; ENOENT
                raise OutsideRunDir(f"{part}: {err.strerror}", err.errno == errno.ENOENT) from None
            os.close(fd)
            fd = nfd
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutsideRunDir(f"{'/'.join(parts)} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


#: Room a runs root must leave under the system's path limit: a run directory's name (a job
#: name of at most 63 characters, its start time and a counter) and the longest file tfdist
#: writes in it (``logs/<task>.log``), with some to spare.
RUN_DIR_ROOM = 128
#: Room a named run directory (``--run-dir``) must leave for the files tfdist writes in it.
RUN_FILES_ROOM = 40


def _shown(path: str | Path) -> str:
    """A path short enough for one line of an error (a path too long to use is also too long
    to print)."""
    text = str(path)
    return text if len(text) <= 80 else f"{text[:60]}...{text[-16:]}"


def check_path_length(path: Path, room: int, flag: str) -> None:
    """Refuse a path the system cannot use, with ``room`` bytes to spare for what tfdist will
    create below it: each name at most NAME_MAX, the whole at most PATH_MAX (Linux: 255 and
    4,096 bytes). Without this the first ``stat`` or ``mkdir`` fails with ENAMETOOLONG as a
    traceback, or after the tasks are planned."""
    existing = path
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
        path_max = os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):  # not knowable here: Linux's limits
        name_max, path_max = 255, 4096
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > name_max:
        raise SpecError(f"{flag}: {_shown(path)}: a name in it is {longest} bytes long, over the "
                        f"system's {name_max}; give a shorter path")
    size = len(os.fsencode(str(path)))
    if size + room > path_max:
        raise SpecError(f"{flag}: {_shown(path)} is {size} bytes long; this system allows {path_max} "
                        f"for a whole path and tfdist needs {room} of them below it; give a shorter path")


def check_runs_root(root: str | Path) -> Path:
    """The runs root, checked but not created: a file in its place, a place where it cannot
    be made (no such writable parent), or a path too long for the run directories below it is
    bad input (exit 2) before anything starts."""
    path = Path(os.path.abspath(root))
    check_path_length(path, RUN_DIR_ROOM, "--runs-dir")
    path = path.resolve()
    check_path_length(path, RUN_DIR_ROOM, "--runs-dir")  # a symbolic link may lead further
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
            candidate.mkdir(mode=PRIVATE)
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
    check_path_length(Path(os.path.abspath(path)), RUN_FILES_ROOM, "--run-dir")
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
            path.mkdir(mode=PRIVATE, parents=True)
        except OSError as err:
            raise SpecError(f"--run-dir: cannot create {path} ({err.strerror})") from None
    _mark(path)
    return path.resolve()
