"""Ctrl-C, SIGTERM and SIGHUP as KeyboardInterrupt, held back while bookkeeping runs.

Python raises KeyboardInterrupt wherever the main thread happens to be. Two places in the
supervisor must not be cut in half: starting a task (between the process being created
and it being registered, so that a stop would miss it) and the end of a run (stopping
the last tasks and writing ``summary.json``). Inside :func:`held` a signal is only noted;
the interrupt is raised when the section ends.

A stop is idempotent: once an interrupt is under way, a repeated SIGTERM or SIGHUP (a second
``tfdist stop``, a service manager repeating itself) is ignored, so the tasks keep their whole
grace period to save; only a second Ctrl-C (SIGINT, a person in a hurry) makes the last stop
immediate. ``tfdist stop`` escalates by SIGKILL after its own grace, never by a second SIGTERM.

The handler touches no lock and does no I/O: it runs between two bytecodes of whatever
the main thread was doing, possibly inside a lock the handler would need.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_STATE = {"depth": 0, "pending": False, "stopping": False}


def _handler(signum: int, frame: Any) -> None:
    if _STATE["stopping"] and signum != signal.SIGINT:
        return  # already stopping: the stop under way keeps its grace period
    _STATE["stopping"] = True
    if _STATE["depth"]:
        _STATE["pending"] = True
        return
    raise KeyboardInterrupt


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP interrupt the main thread (call from it)."""
    _STATE.update(pending=False, stopping=False)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _handler)


@contextmanager
def held(*, then_raise: bool = True) -> Iterator[None]:
    """Run the body whole; an interrupt that arrives meanwhile is raised after it.

    With ``then_raise=False`` the interrupt is dropped instead: for the end of a run,
    which is already stopping everything the interrupt asked to stop.
    Without :func:`install` (tfdist used as a library), plain SIGINT is not held.
    """
    _STATE["depth"] += 1
    try:
        yield
    finally:
        _STATE["depth"] -= 1
        if not _STATE["depth"] and _STATE["pending"]:
            _STATE["pending"] = False
            if then_raise:
                raise KeyboardInterrupt
