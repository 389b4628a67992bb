"""What went wrong with an SQLite job store, said as the real cause with the remedy for it.

SQLite reports a full disk sometimes as "database or disk is full" and sometimes as a bare
"disk I/O error" (a write refused with EFBIG or ENOSPC part-way), a lock as "database is
locked", a damaged file as "malformed" or "not a database". Telling the user to move a
corrupt store away when the disk is only full (or another process only holds the lock)
would have them throw away their history, so each cause gets its own message and a
:class:`~tfdist.errors.StoreError` ``kind`` that the recorder uses to decide whether to retry.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from tfdist import durations
from tfdist.errors import SpecError, StoreError

TIMEOUT_ENV = "TFDIST_STORE_TIMEOUT"
DEFAULT_TIMEOUT = 15.0
MAX_TIMEOUT = 3600.0
#: Less free space than this on the store's filesystem counts as a full disk.
LOW_SPACE_BYTES = 1 << 20


def busy_timeout() -> float:
    """Seconds a store operation waits for another process's lock (``TFDIST_STORE_TIMEOUT``).

    Read when a store is opened, never at import: a bad value is bad input for the command
    that uses the store (one line, exit 2), not a crash of every command."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    value = durations.seconds(text, MAX_TIMEOUT)
    if value is None:
        raise SpecError(
            f"{TIMEOUT_ENV}: {text!r} is not a number of seconds from 0 to {MAX_TIMEOUT:g}; "
            f"give e.g. {TIMEOUT_ENV}=30, or unset it for the default ({DEFAULT_TIMEOUT:g})"
        )
    return value


def check_settings() -> None:
    """``TFDIST_STORE_TIMEOUT`` and ``TFDIST_STORE``, checked before a job starts (bad input)."""
    from tfdist.jobs.location import location

    busy_timeout()
    where = location()
    if where.url:  # libpq's own reading of it, with no connection (the driver is loaded here)
        from tfdist.jobs.store_postgres import check_conninfo

        check_conninfo(where.url)


def low_on_space(directory: Path) -> bool:
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < LOW_SPACE_BYTES


def _file_size_limited() -> bool:
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return soft != resource.RLIM_INFINITY


def full_message(path: Path, what: str) -> str:
    if _file_size_limited() and not low_on_space(path.parent):
        return (f"cannot {what} the job store {path}: the file size limit of this process "
                f"(ulimit -f) is reached; raise the limit, or set TFDIST_HOME elsewhere")
    return (f"cannot {what} the job store {path}: the disk is full; free space on "
            f"{path.parent} (the job store keeps its history; do not delete it)")


def corrupt_message(path: Path, detail: str) -> str:
    return (f"job store {path} is damaged ({detail}); move it away to start a new one: "
            f"mv {path} {path}.bad")


def classify(err: BaseException, path: Path, what: str, timeout: float) -> StoreError:
    """The StoreError for an sqlite3 or OS error met while trying to ``what`` the store."""
    import sqlite3  # loaded by the store that failed; not at import (``tfdist run`` reads
    # busy_timeout before any task starts, and opens the store only after)

    if isinstance(err, sqlite3.OperationalError):
        text = str(err)
        if "locked" in text or "busy" in text:
            return StoreError(
                f"job store {path} is locked by another process (waited {timeout:g}s while "
                f"trying to {what}); try again when it is done, or wait longer with "
                f"{TIMEOUT_ENV}=60", "locked")
        if "full" in text:
            return StoreError(full_message(path, what), "full")
        if "disk I/O" in text:
            if low_on_space(path.parent) or _file_size_limited():
                return StoreError(full_message(path, what), "full")
            return StoreError(f"cannot {what} the job store {path}: a disk I/O error; check "
                              f"the disk under {path.parent} and try again", "io")
        if "readonly" in text or "unable to open" in text or "authoriz" in text:
            return permission_error(path, what, text)
    if isinstance(err, sqlite3.DatabaseError):
        if _damaged(err) and not has_sqlite_header(path):
            # a text file or anything else named as the store: not a damaged history
            return StoreError(f"job store {path} is not an SQLite database (its first bytes are "
                              "not SQLite's); name the job store's own file with TFDIST_STORE, or "
                              f"move {path} away to start a new store there", "corrupt")
        if _damaged(err):
            return StoreError(corrupt_message(path, str(err)), "corrupt")
        # a query SQLite refused (a limit, a bad argument): nothing says the file is damaged,
        # and moving the store away would throw a good history away
        return StoreError(f"cannot {what} the job store {path}: SQLite refused it ({err})", "refused")
    if isinstance(err, FileExistsError | NotADirectoryError):
        return StoreError(f"cannot {what} the job store {path}: {path.parent} (TFDIST_HOME) or a "
                          "parent of it is not a directory; set TFDIST_HOME to a directory",
                          "permission")
    if isinstance(err, PermissionError):
        return permission_error(path, what, err.strerror or str(err))
    if isinstance(err, OSError):
        if err.errno in (28, 27, 122):  # ENOSPC, EFBIG, EDQUOT
            return StoreError(full_message(path, what), "full")
        return StoreError(f"cannot {what} the job store {path}: {err.strerror or err}", "io")
    return StoreError(f"cannot {what} the job store {path}: {err}", "io")


#: The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def has_sqlite_header(path: Path) -> bool:
    """Whether ``path`` starts as an SQLite database does (True when it cannot be read: then
    nothing says it is something else)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return True


def _damaged(err: BaseException) -> bool:
    """SQLite's own word that the file is damaged (CORRUPT, NOTADB), by code where the
    driver gives it (Python 3.11+), else by its text."""
    name = str(getattr(err, "sqlite_errorname", "") or "")
    if name:
        return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
    text = str(err)
    return "malformed" in text or "not a database" in text or "corrupt" in text


def not_a_file(path: Path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a directory (a named
    pipe, a device such as /dev/null, a socket): SQLite fails on each with "disk I/O error",
    which would send the user to check a disk that is fine."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, name in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None


def permission_error(path: Path, what: str, detail: str) -> StoreError:
    if path.is_dir():
        return StoreError(f"cannot {what} the job store {path}: it is a directory, not a file; "
                          f"move it away or set TFDIST_HOME to another directory", "permission")
    return StoreError(
        f"cannot {what} the job store {path} ({detail}): this user may not read or write it; "
        f"check its owner and mode (ls -l {path}) or set TFDIST_HOME to a directory of your own",
        "permission")
