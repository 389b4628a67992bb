"""Helpers for the job-store tests: another process holding the store's write lock, and a
job that runs until the test says so."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
print("released", flush=True)
"""

#: A task that runs until ``<run dir>/go-<task>`` (or ``<run dir>/go``) exists, then exits 0.
UNTIL_GO = (
    "import os, time; d = os.environ['TFDIST_RUN_DIR']; t = os.environ['TFDIST_TASK']; "
    "print(t, 'waiting', flush=True)\n"
    "while not (os.path.exists(os.path.join(d, 'go')) or os.path.exists(os.path.join(d, 'go-' + t))):"
    " time.sleep(0.05)\n"
    "print(t, 'done', flush=True)"
)


class LockHolder:
    """Another process that holds ``BEGIN EXCLUSIVE`` on the store until :meth:`release`."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(db)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "locked"

    @property
    def holding(self) -> bool:
        return self.proc.poll() is None

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline().strip() == "released"
        self.proc.wait(10)

    def __enter__(self) -> LockHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def wait_until(predicate, timeout: float = 60, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
