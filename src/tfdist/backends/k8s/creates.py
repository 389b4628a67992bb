"""Pod creates sent by a small pool, and stops that never leave a pod behind.

One create at a time made 1,000 pods take over 20 s, so :class:`Creates` keeps up to
:data:`CREATE_CONCURRENCY` requests in flight. The bound is what respects the API server's
priority and fairness (APF): the smallest level a user's requests land in
(``global-default``) has ~49 seats on a default server (600 seats shared 20/245) and queues
of 50, so 8 in flight are never queued or shed (429) on tfdist's account and leave other
clients their share; a 429 is still honoured (:func:`.client.retry_after`) should a
cluster be tighter.

Every create has a state (:data:`QUEUED` until a pool thread takes it). A stop takes the
queued ones back (they are never sent) and waits for those in flight, so the caller
deletes only after the last create it may have to delete has returned. A create refused
with a client error (4xx: forbidden, over quota, invalid) holds the queued ones for
:data:`HOLD_AFTER_REFUSAL`: they would be refused too, and the job's stop cancels them.

:meth:`Creates.after` runs work once no create is queued or in flight: the backend defers
the pods' log requests to then (see ``backend.py``), so that while a large job is created
the API server's CPU goes to the creates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

#: Pod creates (and deletes) in flight at once; see the module docstring for why 8.
CREATE_CONCURRENCY = 8
#: Seconds one create or delete may take before it counts as failed (a stop waits for it).
REQUEST_TIMEOUT = 30
#: Seconds queued creates wait after one was refused: the supervisor, told of the failure,
#: stops the job within milliseconds; a run that goes on (an evaluator may fail alone)
#: resumes creating after this.
HOLD_AFTER_REFUSAL = 1.0
#: A create's life: queued in the pool, sent, then one of the three ends.
QUEUED, CREATING, CREATED, FAILED, CANCELLED = "queued", "creating", "created", "failed", "cancelled"


class Creatable(Protocol):
    create: str  # one of the states above
    sent: threading.Event  # set once the create returned or was cancelled


def refused(err: Exception) -> bool:
    """A client error: the same request would be refused again (429 is only "later")."""
    status = getattr(err, "status", None) or 0
    return 400 <= status < 500 and status != 429


class Creates:
    """The pool; ``lock`` is the caller's lock over the states, ``closing`` its end."""

    def __init__(self, lock: Any, closing: threading.Event) -> None:
        self._lock = lock
        self._closing = closing
        self._pool = ThreadPoolExecutor(CREATE_CONCURRENCY, thread_name_prefix="k8s-create")
        self._refused_at: float | None = None
        self._pending = 0  # creates submitted whose _run has not returned
        self._after: list[Callable[[], None]] = []

    def submit(self, item: Creatable, send: Callable[[], None],
               failed: Callable[[Exception, bool], None]) -> None:
        """Queue ``send()``; should it raise, ``failed(error, refused)`` is called after the
        state is FAILED (and ``sent`` set)."""
        with self._lock:
            self._pending += 1
        try:
            self._pool.submit(self._run, item, send, failed)
        except RuntimeError:  # the pool is shut down: the run is closing
            self._done()
            raise

    @property
    def pending(self) -> int:
        """Creates submitted whose request has not returned (or been cancelled): 0 after
        :meth:`shutdown`, so no create of the run can reach the API server any more."""
        with self._lock:
            return self._pending

    def after(self, work: Callable[[], None]) -> None:
        """Run ``work()`` once no create is queued or in flight: now if none is (on the
        caller's thread), else on the pool thread that finishes the last one."""
        with self._lock:
            if self._pending:
                self._after.append(work)
                return
        work()

    def _done(self) -> None:
        with self._lock:
            self._pending -= 1
            due, self._after = (self._after, []) if not self._pending else ([], self._after)
        for work in due:
            work()

    def _run(self, item: Creatable, send: Callable[[], None],
             failed: Callable[[Exception, bool], None]) -> None:
        try:
            self._send(item, send, failed)
        finally:
            self._done()

    def _send(self, item: Creatable, send: Callable[[], None],
              failed: Callable[[Exception, bool], None]) -> None:
        held = self._refused_at
        if held is not None:
            self._closing.wait(max(0.0, held + HOLD_AFTER_REFUSAL - time.monotonic()))
        with self._lock:
            if item.create != QUEUED:
                return  # cancelled while queued
            item.create = CREATING
        error: Exception | None = None
        try:
            send()
        except Exception as err:
            error = err
            if refused(err):
                self._refused_at = time.monotonic()
        finally:
            with self._lock:
                item.create = CREATED if error is None else FAILED
            item.sent.set()
        if error is not None:
            failed(error, refused(error))

    def take_back(self, items: Iterable[Creatable]) -> tuple[list[Any], list[Any]]:
        """Cancel the queued creates of ``items`` and wait for those in flight. Returns
        (cancelled, existing): the latter created, or possibly (a create that timed out)."""
        items = list(items)
        with self._lock:
            cancelled = [i for i in items if i.create == QUEUED]
            for item in cancelled:
                item.create = CANCELLED
                item.sent.set()
        for item in items:
            item.sent.wait(REQUEST_TIMEOUT + 5)
        return cancelled, [i for i in items if i.create in (CREATED, CREATING)]

    def each(self, call: Callable[[Any], None], items: list[Any]) -> None:
        """``call(item)`` for each item, as many at once as creates (1,000 deletes one by
        one would take as long as 1,000 creates did)."""
        if len(items) < 2:
            for item in items:
                call(item)
        else:
            list(self._pool.map(call, items))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
