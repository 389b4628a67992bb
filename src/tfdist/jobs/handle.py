"""The Python handle on a recorded job: ``status()``, ``logs()``, ``wait()``, ``stop()``."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from tfdist.jobs.manage import describe, log_files, stop, tail_lines
from tfdist.jobs.store import Store
from tfdist.states import JobState


class JobHandle:
    """A recorded job: ``status()``, ``logs()``, ``wait()``, ``stop()``."""

    def __init__(self, job_id: str, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.id = job_id
        self._popen = popen

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r})"

    @contextlib.contextmanager
    def _store(self) -> Iterator[Store]:
        store = Store()
        try:
            yield store
        finally:
            store.close()

    def _reap(self) -> None:
        if self._popen is not None:
            self._popen.poll()  # a finished supervisor we started must not linger as a zombie

    def status(self) -> dict[str, Any]:
        """The job as recorded (``state`` is effective: ``lost`` if its supervisor died),
        with ``tasks``: each task's state, pid, host, address, restarts, exit code, progress."""
        self._reap()
        with self._store() as store:
            return describe(store, self.id).to_dict()

    def _state(self) -> JobState:
        """The effective state alone: the job's row (and its summary while it is active),
        not the tasks and events :meth:`status` reads."""
        self._reap()
        with self._store() as store:
            return store.job(self.id).state  # effective: lost, or the summary's end

    @property
    def state(self) -> str:
        return str(self._state())

    def logs(self, task: str | None = None, tail: int | None = None) -> str:
        """A task's log (every task's, prefixed with ``[task]``, when ``task`` is None)."""
        self._reap()
        with self._store() as store:
            status = describe(store, self.id)
        files = log_files(status.job, task, [t.name for t in status.tasks])
        lines: list[str] = []
        for label, path in files:
            for line in tail_lines(path, tail):
                lines.append(line if task else f"[{label}] {line}")
        return "\n".join(lines) + ("\n" if lines else "")

    def wait(self, timeout: float | None = None, poll: float = 0.2) -> dict[str, Any]:
        """Block until the job ends (or is lost); returns its final status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self._state()
            if not state.active:
                return self.status()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {self.id} still {state} after {timeout:g}s")
            time.sleep(poll)

    def stop(self, grace: float = 30.0) -> dict[str, Any]:
        with self._store() as store:
            stop(store, self.id, grace)
        self._reap()
        return self.status()


def handle(job_id: str) -> JobHandle:
    """A handle on a job already recorded (a unique id prefix is enough)."""
    with contextlib.closing(Store()) as store:
        return JobHandle(store.job(job_id).id)
