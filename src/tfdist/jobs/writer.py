"""The recorder's writer thread: store writes that never block the supervisor.

The supervisor acts on task exits between two events; a store write that waits for another
process's lock (up to the busy timeout) or fails on a full disk must not hold it there, nor
lose the job's record. So the recorder only *submits* operations (:data:`~tfdist.jobs.store.Op`)
to a bounded queue, and this thread writes them:

- everything waiting is written as one batch in one transaction (a 1,000-task job's burst of
  transitions is a few transactions, not thousands);
- a batch that fails because the store is locked, the disk is full or an I/O error occurs is
  kept and retried with backoff (50 ms doubling to 2 s) until it lands: the store catches up
  once it is free;
- a store that is damaged or unreadable (nothing a retry can fix) stops the recording, said
  once;
- when the queue is full the newest operation is dropped and that is said once; the final
  operations (:meth:`StoreWriter.submit` with ``final=True``) are never dropped, so the
  job's end still lands;
- :meth:`StoreWriter.close` waits (bounded) for the queue to drain and says what was not
  written. The run directory's ``summary.json`` and ``events.jsonl`` then stand in for the
  missing records (:mod:`tfdist.jobs.fallback`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from tfdist import errors
from tfdist.errors import StoreError
from tfdist.jobs.store import Op, Store

#: Operations waiting at most; beyond this, new ones are dropped (said once).
MAX_PENDING = 20_000
#: Operations written in one transaction at most.
MAX_BATCH = 5_000
BACKOFF_START = 0.05
BACKOFF_MAX = 2.0


class StoreWriter:
    """One thread that writes submitted operations to ``store`` in batches (see module doc)."""

    def __init__(self, store: Store, *, max_pending: int = MAX_PENDING,
                 warn: Callable[[str], None] = errors.warn) -> None:
        self.store = store
        self.max_pending = max_pending
        self.warn = warn
        self.written = 0  # operations written
        self.dropped = 0  # operations dropped because the queue was full
        self.batches = 0  # transactions committed
        self.last_error: StoreError | None = None
        self._queue: deque[Op] = deque()
        self._cond = threading.Condition()
        self._inflight = 0  # operations taken for the batch being written (or retried)
        self._closing = False
        self._dead = False  # a permanent error: nothing more is written
        self._said: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="tfdist-store-writer", daemon=True)
        self._thread.start()

    # -- the supervisor's side: never blocks ---------------------------------------------

    @property
    def backlog(self) -> int:
        """Operations waiting to be written."""
        with self._cond:
            return len(self._queue)

    def submit(self, op: Op, *, final: bool = False) -> bool:
        """Queue ``op``; False when it was dropped (queue full, or recording stopped)."""
        with self._cond:
            if self._dead:
                return False
            if len(self._queue) >= self.max_pending and not final:
                self.dropped += 1
                self._say_once("dropped", f"the job store is behind ({self._cause()}); "
                               "dropping records of this job from now on (the end of the job "
                               "is still recorded)")
                return False
            self._queue.append(op)
            self._cond.notify()
            return True

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + self._inflight

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for everything queued to be written."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self._queue or self._inflight) and not self._dead:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return not self._queue and not self._dead

    def close(self, timeout: float) -> bool:
        """Write what is queued (waiting at most ``timeout`` seconds), then stop the thread.
        Returns True when everything submitted was written; otherwise says what was not."""
        done = self.flush(timeout)
        with self._cond:
            self._closing = True
            left = len(self._queue) + self._inflight
            self._cond.notify_all()
        self._thread.join(timeout=1.0)
        if not done and not self._dead:
            self._say_once("unwritten", f"{left} records of this job were not written to the "
                           f"job store: {self._cause()} (status and list read the run "
                           "directory's summary.json instead)")
        return done and self.dropped == 0

    # -- the thread ----------------------------------------------------------------------

    def _cause(self) -> str:
        return str(self.last_error) if self.last_error else "it is slow"

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.warn(message)

    def _run(self) -> None:
        delay = BACKOFF_START
        batch: list[Op] = []
        while True:
            with self._cond:
                while not self._queue and not batch and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                while self._queue and len(batch) < MAX_BATCH:
                    batch.append(self._queue.popleft())
                self._inflight = len(batch)
            try:
                self.store.write_batch(batch, "record this job in")
            except StoreError as err:
                self.last_error = err
                if not err.transient:
                    self._give_up(err, len(batch))
                    return
                if err.kind != "locked":  # a lock is said only if it outlasts the job
                    self._say_once(err.kind, f"{err}; retrying until it works")
                with self._cond:
                    self._cond.wait_for(lambda: self._closing, timeout=delay)
                delay = min(delay * 2, BACKOFF_MAX)
                continue
            except Exception as err:  # a bug in an operation: never take the job down
                self._give_up(StoreError(f"{type(err).__name__}: {err}", "corrupt"), len(batch))
                return
            with self._cond:
                self.written += len(batch)
                self.batches += 1
                batch = []
                delay = BACKOFF_START
                self.last_error = None
                self._inflight = 0
                self._cond.notify_all()

    def _give_up(self, err: StoreError, lost: int) -> None:
        with self._cond:
            self._dead = True
            lost += len(self._queue)
            self._queue.clear()
            self._inflight = 0
            self._cond.notify_all()
        self._say_once("dead", f"this job is no longer recorded in the job store ({lost} records "
                       f"not written): {err}")
