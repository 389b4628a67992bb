"""Read the head of a file the user named, without waiting or reading forever.

A path in a job file or the environment can name a FIFO (opening it waits for a writer), a
device (``/dev/zero`` never ends) or a huge file. So the file is opened non-blocking, must
be a regular file once open (checked on the descriptor: it may have been swapped since a
``stat``), and at most ``limit + 1`` bytes are read, so the caller can tell "too large".
Standard library only.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotRegularFile(OSError):
    """The path is a directory, FIFO, device or socket."""

    def __init__(self) -> None:
        super().__init__(errno.EINVAL, "not a regular file: a directory, FIFO or device")


def read_head(path: str | Path, limit: int) -> bytes:
    """The first ``limit + 1`` bytes of the regular file ``path`` (OSError otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile
        return stream.read(limit + 1)
