"""Files the supervisor appends to (task logs, events, progress) and the summary it writes last,
written so that a full or failing disk never stops a healthy job.

A write that fails (``ENOSPC``, a quota, an I/O error) drops that line, counts it and warns
once per file; training goes on and the summary says how many lines each file lost. The
summary's blocks are reserved when the run starts (``posix_fallocate``), so the one record
that must survive a full disk can still be written at the end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path


class Appender:
    """A line-buffered append-only text file that drops (and counts) what it cannot write."""

    def __init__(self, path: Path, warn: Callable[[str], None]) -> None:
        self.path = path
        self.dropped = 0
        self._warn = warn
        self._handle = None
        try:
            self._handle = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        except OSError as err:
            self._fail(err)

    def _fail(self, err: OSError) -> None:
        if self.dropped == 0:
            self._warn(f"cannot write {self.path.name} ({err.strerror or err}); its lines are dropped "
                       "and counted, the job goes on")
        self.dropped += 1
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None  # reopened on the next write: the disk may have room again

    def write(self, text: str) -> None:
        if self._handle is None and self.dropped:
            try:
                self._handle = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
            except OSError:
                self.dropped += 1
                return
        if self._handle is None:
            self.dropped += 1
            return
        try:
            self._handle.write(text)
        except OSError as err:
            self._fail(err)

    def close(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None


def reserve(path: Path, size: int) -> bool:
    """Allocate ``size`` bytes for a file written later (see :func:`write_reserved`)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        os.posix_fallocate(fd, 0, size)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def write_reserved(path: Path, text: str) -> None:
    """Write ``text`` into a file whose blocks :func:`reserve` set aside: overwrite in place,
    then cut to length, so no new block is needed if the text fits. Raises OSError."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
