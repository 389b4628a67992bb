"""The exceptions tfdist raises on purpose.

The CLI turns every :class:`TfdistError` into one line on stderr and an exit code
(``SpecError`` -> 2, the others -> 1), so their messages must be complete sentences that
name the field or task concerned and say what to do next. A problem that does not stop
tfdist is one line too, written by :func:`warn`. Both print through
:func:`tfdist.safe_text.one_line`, as a message may quote what the user gave (a value, a
path, a flag) verbatim.
"""

from __future__ import annotations

import sys
from typing import IO

from tfdist.safe_text import one_line


def warn(message: str, stream: IO[str] | None = None) -> None:
    """``tfdist: warning: <message>``, one line on stderr (or ``stream``), flushed so it keeps
    its place among the job's own output."""
    out = stream or sys.stderr
    out.write(f"tfdist: warning: {one_line(message)}\n")
    out.flush()


class TfdistError(Exception):
    """Base of every error tfdist expects to happen."""

    exit_code = 1


class SpecError(TfdistError):
    """The job spec or the command line is wrong; nothing was started."""

    exit_code = 2


class BackendError(TfdistError):
    """A backend could not do what was asked (port taken, cluster unreachable, ...)."""

    exit_code = 1


class StoreError(TfdistError):
    """The job store is locked, full, corrupt, unreadable or missing a job.

    ``kind`` says which (``locked``, ``full``, ``io``, ``corrupt``, ``permission``, ``missing``,
    ``refused``: a query the database refused, the store itself being fine):
    the recorder retries the ``transient`` ones and gives up on the others."""

    exit_code = 1

    def __init__(self, message: str, kind: str = "missing") -> None:
        super().__init__(message)
        self.kind = kind

    @property
    def transient(self) -> bool:
        return self.kind in ("locked", "full", "io")
